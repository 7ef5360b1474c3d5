package wire

// counterLua defines counter(k) and setCounter(k, v), the fence counter
// at key k: a sorted set whose member "c" has the counter as its score, so
// that a plain ZADD … GT CH can raise it outside a script (see
// OpAcquireFencedPlain). counter returns the counter as a number (0 where
// there is none), or nil where it is not a number. A
// counter written before 2026-11-29 is a string: counter reads it, and
// setCounter replaces it with the sorted set (an older Client's GET of it
// then fails with WRONGTYPE: it hands out no token, never a wrong one).
const counterLua = `
local function counter(k)
	local s = redis.pcall('ZSCORE', k, 'c')
	if type(s) == 'table' then
		s = redis.pcall('GET', k)
		if type(s) == 'table' then return nil end
	end
	return tonumber(s or '0')
end
local function setCounter(k, v)
	if type(redis.pcall('ZADD', k, v, 'c')) == 'table' then
		redis.call('DEL', k)
		redis.call('ZADD', k, v, 'c')
	end
end
`

// fenceLua defines fence(counters): the fencing token a grant hands out,
// given the keys of the fence counters it advances (no TTL), or an error
// reply. The token is the client's proposal when the proposal is larger
// than every counter (the proposal's acknowledgement: the reply's fence is
// the proposal), and otherwise the next value above the largest counter
// that is ≡ residue (mod modulus), so that values from different nodes
// never coincide. Proposals are ≡ modulus−1, a residue no node has (see
// FenceModulus and Client.propose). The caller checks every counter
// (fence) before it writes anything: a script that fails half-way keeps
// its writes. ARGV[4] residue, ARGV[5] modulus, ARGV[6] proposal (0:
// none).
const fenceLua = counterLua + `
local function fence(counters)
	local c, at = 0, counters[1]
	for _, k in ipairs(counters) do
		local n = counter(k)
		if not n or n < 0 or n ~= math.floor(n) then
			return redis.error_reply('FENCE redlock: fence counter ' .. k .. ' is not a whole number')
		end
		if n > c then c, at = n, k end
	end
	local f = tonumber(ARGV[6])
	if f <= c then
		local m = tonumber(ARGV[5])
		f = c + ((tonumber(ARGV[4]) - c - 1) % m) + 1
	end
	if f >= 9007199254740992 then
		return redis.error_reply('FENCE redlock: fence counter ' .. at .. ' would pass 2^53')
	end
	return f
end
`

// acquireFencedSrc is acquireSrc that also hands out a fencing token (see
// fenceLua): on a grant it sets the key's fence counter (KEYS[2]) to it.
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl ms, ARGV[4] residue, ARGV[5]
// modulus, ARGV[6] proposal (0: none), ARGV[7..9] the waiter as
// acquireSrc's ARGV[4..6] (a key granted to its place is free to it, as
// there).
// Reply: {1 or 2 (as acquire), fence}; refused: as acquire; an error reply
// when the counter is not a number or would reach 2^53.
var acquireFencedSrc = acquireFencedScript("", "")

// acquireFencedScript is acquireFencedSrc with check run first where the
// key is free, and announce run on a grant once the new counter is known:
// Lua that may change val, the value the key is set to (ARGV[2] unless
// it does), given term, the counter as a string. (A mutex's uncontended
// fenced grant needs no script: OpAcquireFencedPlain.)
func acquireFencedScript(check, announce string) string {
	return fenceLua + markLua + `
local v = redis.call('GET', KEYS[1])
local since = '' -- a reservation's: the release the key has been free since (see queueLua)
if v and string.byte(v) == 0 then since, v = string.sub(v, 2), false end -- reserved for the queue: free to its head
if v and ARGV[7] and ARGV[7] ~= '' and (v == ARGV[7] or string.sub(v, 1, #ARGV[7] + 1) == ARGV[7] .. '\0') then
	v = false -- a release granted the key to our place (a fenced one's, without a token): our attempt takes it
end
local code = 1
local queued = false -- places are left in the key's queue: the value is marked (Queued)
if not v then` + check + gateIf(7) + `
else
	if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
		code, queued = 2, marked(v)
	else` + requeueIf(7) + `
		local nul = string.find(v, '\0', 1, true)
		if nul then v = string.sub(v, 1, nul - 1) end
		return {-1 - redis.call('PTTL', KEYS[1]), v}
	end
end
local f = fence({KEYS[2]})
if type(f) == 'table' then return f end
local term, val = string.format('%.0f', f), ARGV[2]` + announce + `
if queued then val = addMark(val) end
setCounter(KEYS[2], term)
redis.call('SET', KEYS[1], val, 'PX', ARGV[3])
return {code, f}
`
}

// fenceWriteSrc writes a fencing token back: counter = max(counter, t), for
// the fence counter (k..":fence") of each lock key k in KEYS (one, or a
// multi-key lock's). It acknowledges where all our keys are there, whatever
// the counters (a counter above t there was raised by a refused plain
// acquire's ZADD, never by a grant: no other grant ran on the node since
// ours), and raises the counters below t; where none of our keys is there
// (they expired), only where every counter was below t. It never
// acknowledges where another token holds a lock key (another holder's
// grant there may have started before ours and must not be overtaken:
// docs/fencing.md). ARGV[1] t, ARGV[2] token.
// Reply: 1 acknowledged; 0 a counter at or above t and our keys gone;
// −1 another token holds a lock key.
const fenceWriteSrc = counterLua + `
local ours = true
for _, k in ipairs(KEYS) do
	local v = redis.call('GET', k)
	if not v or string.byte(v) == 0 then
		ours = false
	elseif v ~= ARGV[2] and string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. '\0' then
		return -1
	end
end
local t = tonumber(ARGV[1])
local below = {}
for _, k in ipairs(KEYS) do
	local c = counter(k .. ':fence')
	if not c then
		return redis.error_reply('FENCE redlock: fence counter ' .. k .. ':fence is not a whole number')
	end
	if c >= t and not ours then return 0 end
	if c < t then below[#below + 1] = k .. ':fence' end
end
for _, f in ipairs(below) do setCounter(f, ARGV[1]) end
return 1
`

// FenceModulus: node i's fence counter only takes values ≡ i (mod 64), and
// clients' proposals are ≡ 63, so at most 63 nodes. Every client must list
// the nodes in the same order.
const FenceModulus = 64

// MaxFence: fencing tokens stay below 2^53, exact in every JSON number and
// in Lua, whose numbers are doubles.
const MaxFence = 1 << 53
