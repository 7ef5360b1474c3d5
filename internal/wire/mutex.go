package wire

// acquireSrc takes the lock or re-enters it.
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl in ms, ARGV[4] waiter ID,
// ARGV[5] ticket, ARGV[6] lease ms (see gateLua; a caller not queued
// passes none of the three).
// Reply: 1 created; 2 we held it already (re-entry), value and TTL refreshed;
// refused: {−(holder's PTTL + 1), holder's token}, where 0 means the
// holder's key has no TTL, −1 a PTTL of 0 ms, −101 a PTTL of 100 ms, or
// the queue's refusal (gateLua). The holder's token lets a waiter tell a
// holder with a majority from a split vote; it never leaves the library.
// A key a release granted to the waiter's place (its ID: see queueLua's
// grant) is free to the waiter's attempt, through the queue's gate.
var acquireSrc = acquireScript("")

// acquireScript is acquireSrc with check run first where the key is free.
func acquireScript(check string) string {
	return markLua + `
local v = redis.call('GET', KEYS[1])
local since = '' -- a reservation's: the release the key has been free since (see queueLua)
if v and string.byte(v) == 0 then since, v = string.sub(v, 2), false end -- reserved for the queue: free to its head
if v and ARGV[4] and ARGV[4] ~= '' and (v == ARGV[4] or string.sub(v, 1, #ARGV[4] + 1) == ARGV[4] .. '\0') then
	v = false -- a release granted the key to our place: our attempt takes it (see queueLua's grant)
end
local queued = false -- places are left in the key's queue: the value is marked (Queued)
if not v then` + check + gateIf(4) + `
	redis.call('SET', KEYS[1], queued and addMark(ARGV[2]) or ARGV[2], 'PX', ARGV[3])
	return 1
end
if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
	redis.call('SET', KEYS[1], marked(v) and addMark(ARGV[2]) or ARGV[2], 'PX', ARGV[3])
	return 2
end` + requeueIf(4) + `
local nul = string.find(v, '\0', 1, true)
if nul then v = string.sub(v, 1, nul - 1) end
return {-1 - redis.call('PTTL', KEYS[1]), v}
`
}

// extendSrc resets the TTL of a key we hold; it never re-creates one.
// ARGV[1] token, ARGV[2] ttl in ms.
// Reply: 1 extended; 0 key absent (expired); −1 another token holds it.
const extendSrc = `
local v = redis.call('GET', KEYS[1])
if not v or string.byte(v) == 0 then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`

// releaseSrc deletes a key we hold or, when the key's wait queue has a
// live first waiter, leaves it Reserved for the queue (see queueLua) and
// wakes that waiter: it publishes {lock key, NUL, token, NUL, waiter
// ID} on the channel of the waiter's Client (ARGV[3] followed by the part of
// the ID before its first '.'); a read-write lock's writer wakes every
// reader at the front (wakeFront); a waiter that may be granted the key
// it grants it instead (queueLua's grant), unless ARGV[4] says the release
// hands the key to its own Client's next waiter, whose attempt comes right
// behind it. With a cooldown, it leaves the key in place
// to expire cooldown ms from now instead, keeping other tokens out until
// then, and wakes nobody. A token that is a place's ID (a granted
// writer's, or a place a release may grant) takes that place out too, and
// its look's number, handing a reservation made for it on.
// A fenced waiter's place ('.wif': see queueLua) is granted the key with
// a fencing token, the releaser's proposal (ARGV[5]), where that is above
// the key's fence counter, which it then becomes (the same two facts as
// every fenced grant: docs/fencing.md); the notice names it. Otherwise the
// grant has no token, and the waiter's attempt takes the key (and gets
// one). An election's candidate ('.wie') is granted only with a token and
// its value (kept by its look: queueSrc's ARGV[6]): the key is set to its
// ID with "TERM.1~ VALUE", TERM the token, which is published on
// KEYS[1]..":leader", as the election's acquire announces
// (acquireElectionSrc); without either it is woken to attempt. A waiter
// with metadata ('.wim', '.wifm') is granted only with it (kept by its
// look, as a candidate's value), set beside its ID; else it is woken.
// ARGV[1] token, ARGV[2] cooldown in ms (0: delete now), ARGV[3] the wake
// channels' prefix, or "" to wake nobody (taking back a failed attempt's
// grants, which released no lock anyone held; the key is still Reserved
// for a queue), ARGV[4] (optional) 1: a hand-over, which grants nobody
// (0: not), ARGV[5] (optional) the releaser's fencing proposal. The short
// form is the token alone: no cooldown, and the wake channels' prefix is
// the key's own (the part before its '{') followed by "wake:", as a
// Client names them (Op.release sends it only then).
// Reply: 1 released, or {1, first waiter} when a queue was found; 0 key
// absent (expired); −1 another token holds it.
//
// The uncontended release is its first lines: a value that is the token
// alone (no metadata, no Queued mark: no place was put in the queue while
// we held it), released with no cooldown and no ARGV[4], is deleted, and
// nothing else is read. A release whose token is a place's ID always
// sends ARGV[4] (Op.release), so that its place is taken out (placeOutLua)
// whatever the value. On one redis-server the fast path runs about 2,400
// fewer instructions per call than the general path did (callgrind); sent
// in its short form (the token alone), it costs the server what the
// floor's two-line compare-and-delete does (1.52 against 1.51 µs a call,
// 1.73 with the three arguments: docs/performance.md, 2026-12-04).
//
// The one-key scripts stay apart from the multi-key ones, loops and all:
// they are on every lock's path, and under load the nodes' CPU is the
// limit (a release looping over KEYS cost the 256-goroutine throughput
// about 15% in an A/B run).
var releaseSrc = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] and (not ARGV[2] or ARGV[2] == '0' and not ARGV[4]) then -- the uncontended release: ours, unmarked, no cooldown, no place (Op.release)
	redis.call('DEL', KEYS[1])
	return 1
end
local ARGV = ARGV[2] and ARGV or {ARGV[1], '0', string.match(KEYS[1], '^[^{]*') .. '` + WakeInfix + `'} -- the short form's: no cooldown, the key's prefix's wake channels
` + placeOutLua(".wi", queueLua) + `
if placeMoved then v = redis.call('GET', KEYS[1]) end -- again, where the token was a queued place's (Op.release): its leave may have handed a reservation on
if not v or string.byte(v) == 0 then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
if ARGV[2] ~= '0' then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
if string.byte(v, #ARGV[1] + 2) == 2 then -- Queued: places were put in the key's queue while we held it
` + queueLua + counterLua + `
	local function fenceFor(p) -- a fenced place's token: the releaser's proposal p, where above the counter (else none)
		p = tonumber(p or '')
		local c = p and counter(KEYS[1] .. ':fence')
		if not c or c >= p then return nil end
		p = string.format('%.0f', p)
		setCounter(KEYS[1] .. ':fence', p)
		return p
	end
	local q, l = qkeys()
	local h, left = head(q, l, now())
	if h then
		if ARGV[3] == '' then -- sent to wake nobody: no release to name
			reserve(left)
			return 1
		end
		local granting = grants(h) and ARGV[4] ~= '1'
		local meta = granting and valueOf(h) -- (false: a value it should have kept is gone: it is woken)
		local fence = granting and meta ~= false and (fenced(h) or elects(h)) and fenceFor(ARGV[5]) or nil
		if granting and meta ~= false and (fence or not elects(h)) then -- (a candidate: only with its value and a term)
			if isSet(h) then grantRest(ARGV[3], h, KEYS[1]) end -- (their notices first)
			if elects(h) then -- announced by the grant, as the election's acquire does (acquireElectionSrc)
				meta = fence .. '.1~' .. string.sub(meta, 4)
				redis.call('PUBLISH', KEYS[1] .. ':leader', fence)
			end
			grant(ARGV[3], q, l, h, left, nil, fence, meta)
			return {1, h}
		end
		reserve(left, nil, ARGV[1])
		wakeFront(ARGV[3], h, ARGV[1])
		return {1, h}
	end
end
redis.call('DEL', KEYS[1])
return 1
`

// mutexScripts are a mutex holder's, and the ops every primitive shares
// (inspect, the wait queue, the fence write-back, an election's proclaim):
// the scripts of any kind a primitive has none of its own for.
var mutexScripts = scriptSet{
	OpAcquire: acquireSrc, OpExtend: extendSrc, OpRelease: releaseSrc, OpInspect: inspectSrc,
	OpAcquireFenced: acquireFencedSrc, OpFenceWrite: fenceWriteSrc, OpQueue: queueSrc, OpProclaim: proclaimSrc,
}
