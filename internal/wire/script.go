package wire

import (
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds what the library sends a node: every operation is one Lua
// script, so each is atomic on the node and costs one round trip (node.go
// sends it, with EVALSHA, and decodes the reply).
//
// A lock is one string key. Its value is the holder's token, followed by a
// NUL byte and the holder's metadata when there is any, so ownership is "the
// value is the token, or starts with token+NUL". Tokens never contain NUL.
//
// Only GET, SET, PTTL, PEXPIRE and DEL touch the key: a key of another type
// makes GET fail with WRONGTYPE, the script stops, and the foreign key is
// left as it was.

// The scripts. Each takes the lock key as KEYS[1].

// The wait queue. Each lock key has, on every node, a queue of waiters:
// KEYS[1]..":queue", a sorted set of waiter IDs scored by ticket (a number
// the waiter chose once, the same on every node), and KEYS[1]..":lease", the
// same IDs scored by the node time (ms) at which the entry lapses unless
// its waiter refreshes it. Both keys carry a TTL as long as the newest
// lease, so a queue whose waiters all died disappears. (The queue keys share
// the lock key's hash tag, so Cluster nodes have them in its slot.)
//
// While the queue holds a live entry, a free key is granted only to the
// waiter at its head (the lowest ticket; equal tickets by ID), or to the
// holder re-entering. The queue only decides who may try: a grant is still
// the key set to the holder's token on a majority.
//
// queueLua is the functions the scripts that touch the queue share: head
// drops lapsed entries from the front and returns the first live one with
// its lease left (ms), enqueue adds or refreshes an entry, wake tells a
// waiter's Client that the waiter is first and the key free. A waiter ID is
// its Client's ID, '.', and a number; each Client listens on one channel,
// the wake prefix (by default "redlock:wake:") followed by its ID, so a
// release reaches only the process whose waiter is first.
const queueLua = `
local function qkeys(k)
	k = k or KEYS[1]
	return k .. ':queue', k .. ':lease'
end
local function now()
	local t = redis.call('TIME')
	return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function head(q, l, t)
	while true do
		local h = redis.call('ZRANGE', q, 0, 0)[1]
		if not h then return false, 0 end
		local until_ = tonumber(redis.call('ZSCORE', l, h) or '0')
		if until_ > t then return h, until_ - t end
		redis.call('ZREM', q, h)
		redis.call('ZREM', l, h)
	end
end
local function enqueue(q, l, t, id, ticket, lease)
	redis.call('ZADD', q, ticket, id)
	redis.call('ZADD', l, t + lease, id)
	if redis.call('PTTL', l) < lease then
		redis.call('PEXPIRE', q, lease)
		redis.call('PEXPIRE', l, lease)
	end
end
local function leave(q, l, id)
	redis.call('ZREM', q, id)
	redis.call('ZREM', l, id)
end
local function wake(prefix, id, token, k)
	local client = string.match(id, '^[^.]*')
	redis.call('PUBLISH', prefix .. client, (k or KEYS[1]) .. '\0' .. token .. '\0' .. id)
end
`

// gateLua decides whether a free key may be granted: gate returns nil when
// it may (and takes the waiter's entry out of the queue), or the refusal
// {−(head's lease left + 1), "", head}. A waiter with a ticket (not '0')
// is queued (or refreshed) first, so that a node that had lost its entry
// puts it back where its ticket says. id is "" and ticket '0' for a caller
// not queued (a first attempt).
//
// The scripts define these functions only where they use them, inside the
// branch that needs the queue: a Lua function definition runs each time the
// script does, and the uncontended path (a free key and no queue, or a
// release that finds no queue) pays one EXISTS and no more.
const gateLua = `
local function gate(id, ticket, lease)
	local q, l = qkeys()
	local t = now()
	if ticket ~= '0' then enqueue(q, l, t, id, ticket, tonumber(lease)) end
	local h, left = head(q, l, t)
	if h and h ~= id then return {-1 - left, '', h} end
	if h then leave(q, l, h) end
	return nil
end
`

// gateIf is the free-key branch of the acquire scripts, with the waiter's
// ID, ticket and lease in ARGV[i], ARGV[i+1], ARGV[i+2].
func gateIf(i int) string {
	id, ticket, lease := placeArgv(i)
	return `
	if ` + ticket + ` ~= '0' or redis.call('EXISTS', KEYS[1] .. ':queue') == 1 then
` + queueLua + gateLua + `
		local refused = gate(` + id + `, ` + ticket + `, ` + lease + `)
		if refused then return refused end
	end
`
}

// placeArgv names, in Lua, a queued waiter's ID, ticket and lease given
// from ARGV[i] on; a caller not queued passes none of them.
func placeArgv(i int) (id, ticket, lease string) {
	return fmt.Sprintf("(ARGV[%d] or '')", i), fmt.Sprintf("(ARGV[%d] or '0')", i+1), fmt.Sprintf("ARGV[%d]", i+2)
}

// requeueIf puts a queued waiter's entry back (or refreshes it) where
// another token holds the key.
func requeueIf(i int) string {
	id, ticket, lease := placeArgv(i)
	return `
	if ` + ticket + ` ~= '0' then
` + queueLua + `
		local q, l = qkeys()
		enqueue(q, l, now(), ` + id + `, ` + ticket + `, tonumber(` + lease + `))
	end
`
}

// acquireSrc takes the lock or re-enters it.
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl in ms, ARGV[4] waiter ID,
// ARGV[5] ticket, ARGV[6] lease ms (see gateLua; a caller not queued
// passes none of the three).
// Reply: 1 created; 2 we held it already (re-entry), value and TTL refreshed;
// refused: {−(holder's PTTL + 1), holder's token}, where 0 means the
// holder's key has no TTL, −1 a PTTL of 0 ms, −101 a PTTL of 100 ms, or
// the queue's refusal (gateLua). The holder's token lets a waiter tell a
// holder with a majority from a split vote; it never leaves the library.
var acquireSrc = acquireScript("")

// acquireWriteSrc is acquireSrc for a read-write lock's writer: a free key
// is granted only where no reader holds (see readersLua); otherwise the
// refusal is {−(the readers' longest lease left + 1), ReadersHolder}.
var acquireWriteSrc = acquireScript(readersIf(4))

// acquireScript is acquireSrc with check run first where the key is free.
func acquireScript(check string) string {
	return `
local v = redis.call('GET', KEYS[1])
if not v then` + check + gateIf(4) + `
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 2
end` + requeueIf(4) + `
local nul = string.find(v, '\0', 1, true)
if nul then v = string.sub(v, 1, nul - 1) end
return {-1 - redis.call('PTTL', KEYS[1]), v}
`
}

// The readers of a read-write lock (see RWMutex): on each node,
// KEYS[1]..":readers", a sorted set of reader tokens scored by the node
// time (ms) at which each reader's hold lapses unless it extends it. The
// set's TTL is as long as its longest lease, so a set whose readers all
// died disappears. A writer's key is the lock key itself, KEYS[1]; its
// wait queue is the key's. Nodes grant a writer only where no reader's
// lease is live, and a reader only where no writer holds the key and no
// writer waits in the queue: so no node ever has a writer's key and a
// live reader at once.
//
// readersLua defines readers(t): the live readers' longest lease left at
// node time t (ms), 0 if none; it drops lapsed readers.
const readersLua = `
local function readers(t)
	local r = KEYS[1] .. ':readers'
	redis.call('ZREMRANGEBYSCORE', r, '-inf', t)
	local last = redis.call('ZRANGE', r, -1, -1, 'WITHSCORES')[2]
	if not last then return 0 end
	return tonumber(last) - t
end
`

// ReadersHolder is the holder a writer's refusal names when readers hold
// the lock. Tokens never contain NUL, so no token is it.
const ReadersHolder = "\x00readers"

// readersIf is the free-key check of a writer's acquire: refused while
// readers hold, keeping a queued writer's place (its waiter in ARGV[i..]).
func readersIf(i int) string {
	return `
	if redis.call('EXISTS', KEYS[1] .. ':readers') == 1 then
` + queueLua + readersLua + `
		local left = readers(now())
		if left > 0 then` + requeueIf(i) + `
			return {-1 - left, '\0readers'}
		end
	end
`
}

// readAcquireSrc adds a reader, or refreshes one (re-entry), where no
// writer holds the key and no writer waits first in its queue.
// ARGV[1] token, ARGV[2] value (unused: readers keep no metadata),
// ARGV[3] ttl in ms.
// Reply: 1 added; 2 the token was a live reader already (its lease
// renewed); refused: acquireSrc's {−(PTTL + 1), writer's token}, or the
// queue's {−(lease left + 1), ”, first waiter}.
const readAcquireSrc = queueLua + readersLua + `
local v = redis.call('GET', KEYS[1])
if v then
	local nul = string.find(v, '\0', 1, true)
	if nul then v = string.sub(v, 1, nul - 1) end
	return {-1 - redis.call('PTTL', KEYS[1]), v}
end
local r = KEYS[1] .. ':readers'
local t = now()
readers(t)
local mine = redis.call('ZSCORE', r, ARGV[1])
if not mine and redis.call('EXISTS', KEYS[1] .. ':queue') == 1 then
	local q, l = qkeys()
	local h, left = head(q, l, t)
	if h then return {-1 - left, '', h} end
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', r, t + ttl, ARGV[1])
if redis.call('PTTL', r) < ttl then redis.call('PEXPIRE', r, ttl) end
if mine then return 2 end
return 1
`

// readExtendSrc renews a live reader's lease; it never re-adds a lapsed
// one. ARGV[1] token, ARGV[2] ttl in ms.
// Reply: 1 extended; 0 the reader is gone (its lease lapsed).
const readExtendSrc = queueLua + `
local r = KEYS[1] .. ':readers'
local t = now()
local s = redis.call('ZSCORE', r, ARGV[1])
if not s or tonumber(s) <= t then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', r, t + ttl, ARGV[1])
if redis.call('PTTL', r) < ttl then redis.call('PEXPIRE', r, ttl) end
return 1
`

// readReleaseSrc takes a reader out. With a cooldown its lease is set to
// end cooldown ms from now instead, keeping writers out until then. The
// last live reader to leave, with the key free, wakes the first waiter of
// the key's queue (a writer), as releaseSrc does, but in the name of all
// readers (readersLeft for the token): each node's last reader may be
// another, and the waiter's Client wakes it at each such notice.
// ARGV[1] token, ARGV[2] cooldown in ms (0: now), ARGV[3] the wake
// channels' prefix ("": wake nobody).
// Reply: 1 released, or {1, first waiter} when it woke one; 0 the reader
// was gone.
const readReleaseSrc = queueLua + readersLua + `
local r = KEYS[1] .. ':readers'
local t = now()
local s = redis.call('ZSCORE', r, ARGV[1])
if not s or tonumber(s) <= t then
	redis.call('ZREM', r, ARGV[1])
	return 0
end
local cooldown = tonumber(ARGV[2])
if cooldown > 0 then
	redis.call('ZADD', r, t + cooldown, ARGV[1])
	if redis.call('PTTL', r) < cooldown then redis.call('PEXPIRE', r, cooldown) end
	return 1
end
redis.call('ZREM', r, ARGV[1])
if ARGV[3] ~= '' and readers(t) == 0 and redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[1] .. ':queue') == 1 then
	local q, l = qkeys()
	local h = head(q, l, t)
	if h then
		wake(ARGV[3], h, '\1readers')
		return {1, h}
	end
end
return 1
`

// ReadersLeft stands for the released token in a notice that the last
// reader left a node (see readReleaseSrc).
const ReadersLeft = "\x01readers"

// queueSrc joins or refreshes a waiter's entry, or with ticket 0 takes it
// out, and reports the queue and the key.
// ARGV[1] waiter ID, ARGV[2] ticket (0: leave), ARGV[3] lease ms.
// Reply: {head or "", head's lease left ms, the key's PTTL (−2: no key)};
// where the key is free but readers hold (a read-write lock), the
// readers' longest lease left stands for the PTTL. A waiter that leaves from the head of the queue while the key is free
// publishes {ID, NUL, new head} on the key's release channel, as a release
// does, so that the new head need not wait for its timer.
var queueSrc = queueLua + readersLua + `
local q, l = qkeys()
local t = now()
local first = head(q, l, t)
if ARGV[2] == '0' then leave(q, l, ARGV[1]) else enqueue(q, l, t, ARGV[1], ARGV[2], tonumber(ARGV[3])) end
local h, left = head(q, l, t)
local pttl = redis.call('PTTL', KEYS[1])
if pttl == -2 and redis.call('EXISTS', KEYS[1] .. ':readers') == 1 then
	local r = readers(t)
	if r > 0 then pttl = r end
end
if ARGV[2] == '0' and first == ARGV[1] and h and pttl == -2 then
	wake(ARGV[4], h, ARGV[1])
end
return {h or '', left, pttl}
`

// ownedLua defines owned(v): whether a key's value v is ARGV[1]'s, the
// token's (the token alone, or followed by NUL and metadata).
const ownedLua = `
local function owned(v) return v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' end
`

// extendSrc resets the TTL of a key we hold; it never re-creates one.
// ARGV[1] token, ARGV[2] ttl in ms.
// Reply: 1 extended; 0 key absent (expired); −1 another token holds it.
const extendSrc = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`

// extendMultiSrc is extendSrc for a multi-key lock's keys (KEYS): it
// extends only when every key is ours.
// Reply: 1 extended; 0 a key absent (expired); −1 another token holds a
// key.
const extendMultiSrc = ownedLua + `
local st = 1
for _, k in ipairs(KEYS) do
	local v = redis.call('GET', k)
	if not v then st = 0 elseif not owned(v) then return -1 end
end
if st == 0 then return 0 end
for _, k in ipairs(KEYS) do redis.call('PEXPIRE', k, ARGV[2]) end
return 1
`

// releaseSrc deletes a key we hold and, when the key's wait queue has a
// first waiter, wakes it: it publishes {lock key, NUL, token, NUL, waiter
// ID} on the channel of the waiter's Client (ARGV[3] followed by the part of
// the ID before its first '.'). With a cooldown, it leaves the key in place
// to expire cooldown ms from now instead, keeping other tokens out until
// then, and wakes nobody.
// ARGV[1] token, ARGV[2] cooldown in ms (0: delete now), ARGV[3] the wake
// channels' prefix, or "" to wake nobody (taking back a failed attempt's
// grants, which released no lock anyone held).
// Reply: 1 released, or {1, first waiter} when a queue was found; 0 key
// absent (expired); −1 another token holds it.
//
// The one-key scripts stay apart from the multi-key ones, loops and all:
// they are on every lock's path, and under load the nodes' CPU is the
// limit (a release looping over KEYS cost the 256-goroutine throughput
// about 15% in an A/B run).
var releaseSrc = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
if ARGV[2] ~= '0' then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
redis.call('DEL', KEYS[1])
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[1] .. ':queue') == 1 then
` + queueLua + `
	local q, l = qkeys()
	local h = head(q, l, now())
	if h then
		wake(ARGV[3], h, ARGV[1])
		return {1, h}
	end
end
return 1
`

// releaseMultiSrc is releaseSrc for a multi-key lock's keys (KEYS): it
// releases the keys that are ours even when another is not, and wakes the
// first waiter of each key it deletes.
// Reply: 1 released; 0 a key absent (expired); −1 another token holds a
// key.
var releaseMultiSrc = ownedLua + `
local st, mine = 1, {}
for _, k in ipairs(KEYS) do
	local v = redis.call('GET', k)
	if not v then
		if st == 1 then st = 0 end
	elseif owned(v) then
		mine[#mine + 1] = k
	else
		st = -1
	end
end
if ARGV[2] ~= '0' then
	for _, k in ipairs(mine) do redis.call('PEXPIRE', k, ARGV[2]) end
	return st
end
for _, k in ipairs(mine) do
	redis.call('DEL', k)
	if ARGV[3] ~= '' and redis.call('EXISTS', k .. ':queue') == 1 then
` + queueLua + `
		local q, l = qkeys(k)
		local h = head(q, l, now())
		if h then wake(ARGV[3], h, ARGV[1], k) end
	end
end
return st
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
const fenceLua = `
local function fence(counters)
	local c, at = 0, counters[1]
	for _, k in ipairs(counters) do
		local n = tonumber(redis.call('GET', k) or '0')
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
// acquireSrc's ARGV[4..6].
// Reply: {1 or 2 (as acquire), fence}; refused: as acquire; an error reply
// when the counter is not a number or would reach 2^53.
var acquireFencedSrc = acquireFencedScript("")

// acquireWriteFencedSrc is acquireFencedSrc for a read-write lock's
// writer, refused while readers hold, as acquireWriteSrc is.
var acquireWriteFencedSrc = acquireFencedScript(readersIf(7))

// acquireFencedScript is acquireFencedSrc with check run first where the
// key is free.
func acquireFencedScript(check string) string {
	return fenceLua + `
local v = redis.call('GET', KEYS[1])
local code = 1
if not v then` + check + gateIf(7) + `
else
	if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
		code = 2
	else` + requeueIf(7) + `
		local nul = string.find(v, '\0', 1, true)
		if nul then v = string.sub(v, 1, nul - 1) end
		return {-1 - redis.call('PTTL', KEYS[1]), v}
	end
end
local f = fence({KEYS[2]})
if type(f) == 'table' then return f end
redis.call('SET', KEYS[2], string.format('%.0f', f))
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {code, f}
`
}

// multiLua defines free(), the check of a multi-key acquire: it returns
// nil when no key (KEYS) is held by another token, with whether every key
// is ours already, or the refusal of acquireSrc for the first key, in
// KEYS order, that another token holds. It writes nothing: a key of
// another type fails the script here, before any write.
const multiLua = ownedLua + `
local function free()
	local own = 0
	for _, k in ipairs(KEYS) do
		local v = redis.call('GET', k)
		if v then
			if not owned(v) then
				local nul = string.find(v, '\0', 1, true)
				if nul then v = string.sub(v, 1, nul - 1) end
				return {-1 - redis.call('PTTL', k), v}
			end
			own = own + 1
		end
	end
	return nil, own == #KEYS
end
`

// acquireMultiSrc takes every key of a multi-key lock (KEYS) or none: it
// sets them all only when no other token holds any. It ignores the keys'
// wait queues: a multi-key lock is not queued (see MultiLock).
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl ms.
// Reply: 1 set; 2 every key was ours already (re-entry), all refreshed;
// refused: acquireSrc's {−(PTTL + 1), holder's token} for the first key
// held by another token.
var acquireMultiSrc = multiLua + `
local refused, again = free()
if refused then return refused end
for _, k in ipairs(KEYS) do redis.call('SET', k, ARGV[2], 'PX', ARGV[3]) end
if again then return 2 end
return 1
`

// acquireMultiFencedSrc is acquireMultiSrc that also hands out one fencing
// token (see fenceLua) above every key's counter (k..":fence"), and sets
// them all to it: a multi-key lock's token is larger than any handed out
// before for any of its keys, alone or with others.
// ARGV[1..6] as acquireFencedSrc's. Reply: as acquireFencedSrc's.
var acquireMultiFencedSrc = multiLua + fenceLua + `
local refused, again = free()
if refused then return refused end
local counters = {}
for i, k in ipairs(KEYS) do counters[i] = k .. ':fence' end
local f = fence(counters)
if type(f) == 'table' then return f end
for i, k in ipairs(KEYS) do
	redis.call('SET', counters[i], string.format('%.0f', f))
	redis.call('SET', k, ARGV[2], 'PX', ARGV[3])
end
if again then return {2, f} end
return {1, f}
`

// fenceWriteSrc writes a fencing token back: counter = max(counter, t), for
// the fence counter (k..":fence") of each lock key k in KEYS (one, or a
// multi-key lock's). It acknowledges only where no other token holds a
// lock key (another holder's grant there may have started before ours and
// must not be overtaken: docs/fencing.md), and where every counter was
// below t, or equal to it with all our keys there (we set it). A larger
// counter means a later holder has already been handed a larger token.
// ARGV[1] t, ARGV[2] token.
// Reply: 1 acknowledged; 0 a larger (or another holder's equal) fence
// exists; −1 another token holds a lock key.
const fenceWriteSrc = `
local ours = true
for _, k in ipairs(KEYS) do
	local v = redis.call('GET', k)
	if not v then
		ours = false
	elseif v ~= ARGV[2] and string.sub(v, 1, #ARGV[2] + 1) ~= ARGV[2] .. '\0' then
		return -1
	end
end
local t = tonumber(ARGV[1])
local below = {}
for _, k in ipairs(KEYS) do
	local c = tonumber(redis.call('GET', k .. ':fence') or '0')
	if not c then
		return redis.error_reply('FENCE redlock: fence counter ' .. k .. ':fence is not a whole number')
	end
	if c > t or (c == t and not ours) then return 0 end
	if c < t then below[#below + 1] = k .. ':fence' end
end
for _, f in ipairs(below) do redis.call('SET', f, ARGV[1]) end
return 1
`

// proclaimSrc replaces the value (token and metadata) of a key we hold,
// keeping its TTL, and announces it on the channel KEYS[1]..":leader" (an
// election's leader changes; see election.go). It never re-creates a key.
// The notice goes first: a user whose ACL refuses the channel fails the
// script before anything is written. (Observers read the nodes after a
// notice, and a script runs whole before any read.)
// ARGV[1] token, ARGV[2] new value (starting with the token), ARGV[3] the
// notice's payload.
// Reply: 1 replaced; 0 key absent (expired); −1 another token holds it.
const proclaimSrc = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
redis.call('PUBLISH', KEYS[1] .. ':leader', ARGV[3])
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
`

// inspectSrc reads the key's value and PTTL, its fence counter, its wait
// queue (the places whose lease has not lapsed, and the first of them
// among the first 64 by ticket) and its live readers (a read-write lock),
// in one atomic step. It writes nothing: a lapsed place or reader stays
// until a script that writes drops it. KEYS[2] fence key. Reply: {value
// or nil, PTTL, counter or nil, waiters, first waiter or nil, readers}.
const inspectSrc = `
local waiting, first, readers = 0, false, 0
local q, l, r = KEYS[1] .. ':queue', KEYS[1] .. ':lease', KEYS[1] .. ':readers'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', r) == 1 then
	readers = redis.call('ZCOUNT', r, '(' .. now, '+inf')
end
if redis.call('EXISTS', q) == 1 then
	waiting = redis.call('ZCOUNT', l, '(' .. now, '+inf')
	for _, id in ipairs(redis.call('ZRANGE', q, 0, 63)) do
		if tonumber(redis.call('ZSCORE', l, id) or '0') > now then
			first = id
			break
		end
	end
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]), waiting, first, readers}
`

// Kind names an operation; it indexes scripts.
type Kind int

const (
	OpAcquire Kind = iota
	OpExtend
	OpRelease
	OpInspect
	OpAcquireFenced
	OpFenceWrite
	OpQueue
	OpProclaim
)

// FenceModulus: node i's fence counter only takes values ≡ i (mod 64), and
// clients' proposals are ≡ 63, so at most 63 nodes. Every client must list
// the nodes in the same order.
const FenceModulus = 64

// MaxFence: fencing tokens stay below 2^53, exact in every JSON number and
// in Lua, whose numbers are doubles.
const MaxFence = 1 << 53

// script is a Lua script with its SHA1, boxed once so that building a call's
// arguments does not allocate for them.
type script struct {
	src, sha any
}

// The scripts beyond one per op kind: a multi-key lock's acquires,
// extend and release (an op with keys), and a read-write lock's writer acquires and
// reader ops (by the op's mode).
const (
	scriptAcquireMulti = OpProclaim + 1 + iota
	scriptAcquireMultiFenced
	scriptAcquireWrite
	scriptAcquireWriteFenced
	scriptReadAcquire
	scriptReadExtend
	scriptReadRelease
	scriptExtendMulti
	scriptReleaseMulti
	scriptCount
)

var scripts = func() [scriptCount]script {
	var s [scriptCount]script
	for k, src := range [...]string{OpAcquire: acquireSrc, OpExtend: extendSrc, OpRelease: releaseSrc, OpInspect: inspectSrc,
		OpAcquireFenced: acquireFencedSrc, OpFenceWrite: fenceWriteSrc, OpQueue: queueSrc, OpProclaim: proclaimSrc,
		scriptAcquireMulti: acquireMultiSrc, scriptAcquireMultiFenced: acquireMultiFencedSrc,
		scriptAcquireWrite: acquireWriteSrc, scriptAcquireWriteFenced: acquireWriteFencedSrc,
		scriptReadAcquire: readAcquireSrc, scriptReadExtend: readExtendSrc, scriptReadRelease: readReleaseSrc,
		scriptExtendMulti: extendMultiSrc, scriptReleaseMulti: releaseMultiSrc} {
		s[k] = script{src: src, sha: redis.NewScript(src).Hash()}
	}
	return s
}()

// Op is one operation on one key (or a multi-key lock's keys), prepared
// once per round and sent to every node. Its fields say what it asks;
// encode turns them into the wire arguments, once, shared by every node's
// command (go-redis only reads them), and the in-memory test nodes read
// the same fields.
type Op struct {
	Kind              Kind
	Key, Token, Value string        // key: the lock key, or a multi-key lock's first key (Cluster routing)
	Keys              []string      // a multi-key lock's keys (acquires, extend, release, fence write-back); nil for one key
	Mode              Mode          // a read-write lock's side: selects its scripts
	TTL               time.Duration // TTL, or cooldown for release
	Fence             int64         // OpFenceWrite: the token to write back; OpAcquireFenced: the proposal; OpProclaim: the term
	Quiet             bool          // OpQueue: leave the queue
	Wake              any           // OpRelease, OpQueue: the wake channels' prefix (a string); nil: wake nobody
	Place             *Place        // acquires: the caller's place in the wait queue, if it has one; OpQueue: whose

	wire    []any     // EVALSHA sha numkeys keys… args…, built by encode, in argv when it fits
	argv    [14]any   //
	keybuf  [2]string // the KEYS of a one-key op
	residue int       // OpAcquireFenced: the index in wire of the node's residue (ARGV[4])
}

// Place is a waiter's Place in a key's wait queue (see queueLua): its ID
// and ticket, the same on every node, and how long its entry lives there
// without a refresh.
type Place struct {
	ID     string
	Ticket int64
	Lease  time.Duration
}

// Time returns the place's ticket as a Time (it is one, in µs since the
// epoch), zero for none.
func (p *Place) Time() time.Time {
	if p == nil {
		return time.Time{}
	}
	return time.UnixMicro(p.Ticket)
}

// MS is the place's lease in MS.
func (p *Place) MS() int64 { return p.Lease.Milliseconds() }

func NewOp(kind Kind, key, token, value string, ttl time.Duration) *Op {
	return &Op{Kind: kind, Key: key, Token: token, Value: value, TTL: ttl}
}

// NewFenceWrite prepares the write-back of fencing token t for key (or a
// multi-key lock's keys), held with token.
func NewFenceWrite(key string, keys []string, token string, t int64) *Op {
	return &Op{Kind: OpFenceWrite, Key: key, Keys: keys, Token: token, Fence: t}
}

// script is the op's script: its kind's, or the variant its keys or
// mode ask for.
func (o *Op) script() script {
	k := o.Kind
	switch {
	case o.Keys != nil && k == OpAcquire:
		return scripts[scriptAcquireMulti]
	case o.Keys != nil && k == OpAcquireFenced:
		return scripts[scriptAcquireMultiFenced]
	case o.Keys != nil && k == OpExtend:
		return scripts[scriptExtendMulti]
	case o.Keys != nil && k == OpRelease:
		return scripts[scriptReleaseMulti]
	case o.Mode == ModeWrite && k == OpAcquire:
		return scripts[scriptAcquireWrite]
	case o.Mode == ModeWrite && k == OpAcquireFenced:
		return scripts[scriptAcquireWriteFenced]
	case o.Mode == ModeRead && k == OpAcquire:
		return scripts[scriptReadAcquire]
	case o.Mode == ModeRead && k == OpExtend:
		return scripts[scriptReadExtend]
	case o.Mode == ModeRead && k == OpRelease:
		return scripts[scriptReadRelease]
	}
	return scripts[o.Kind]
}

// Mode is what a lock's holder holds: the key (a mutex, or several
// keys), or a read-write lock's write or read side.
type Mode uint8

const (
	ModeMutex Mode = iota
	ModeWrite      // a read-write lock's writer: the key, where no reader holds
	ModeRead       // a reader: an entry in the key's readers set
)

// Encode builds the wire arguments: the one place that knows each script's
// KEYS and ARGV layout (documented with the scripts above). It is called
// once per round, before the op is shared.
func (o *Op) Encode() {
	ms := o.TTL.Milliseconds()
	keys := o.Keys // a multi-key lock's; the ARGV are those of one key
	if keys == nil {
		o.keybuf[0] = o.Key
		keys = o.keybuf[:1]
	}
	// withFence is a one-key op's KEYS with the key's fence counter.
	withFence := func() []string {
		o.keybuf[0], o.keybuf[1] = o.Key, FenceKey(o.Key)
		return o.keybuf[:2]
	}
	switch o.Kind {
	case OpAcquire: // a caller not queued sends no place: the script only checks that there is no queue
		token, value := o.boxed()
		if p := o.Place; p != nil {
			o.set(keys, token, value, ms, p.ID, p.Ticket, p.MS())
		} else {
			o.set(keys, token, value, ms)
		}
	case OpExtend:
		o.set(keys, o.Token, ms)
	case OpRelease:
		o.set(keys, o.Token, ms, o.wakeArg())
	case OpInspect:
		o.set(withFence())
	case OpAcquireFenced: // the residue (ARGV[4]) is per node: see Args
		if o.Keys == nil {
			keys = withFence() // a multi-key script names its counters itself
		}
		o.residue = 3 + len(keys) + 3
		if p := o.Place; p != nil {
			o.set(keys, o.Token, o.Value, ms, 0, FenceModulus, o.Fence, p.ID, p.Ticket, p.MS())
		} else {
			o.set(keys, o.Token, o.Value, ms, 0, FenceModulus, o.Fence)
		}
	case OpFenceWrite:
		o.set(keys, o.Fence, o.Token)
	case OpProclaim: // the notice's payload is the term: see Election
		o.set(keys, o.Token, o.Value, o.Fence)
	case OpQueue:
		var ticket any = o.Place.Ticket
		if o.Quiet {
			ticket = 0
		}
		o.set(keys, o.Place.ID, ticket, o.Place.MS(), o.wakeArg())
	}
}

// boxed returns the op's token and value as arguments: boxed once when
// they are the same string (a holder without metadata), not twice.
func (o *Op) boxed() (token, value any) {
	token = o.Token
	if o.Value == o.Token {
		return token, token
	}
	return token, o.Value
}

// set makes the wire arguments: EVALSHA, the script's SHA1, keys and args.
func (o *Op) set(keys []string, args ...any) {
	w := o.argv[:0]
	if n := 3 + len(keys) + len(args); n > len(o.argv) {
		w = make([]any, 0, n)
	}
	w = append(w, "evalsha", o.script().sha, len(keys))
	for _, k := range keys {
		w = append(w, k)
	}
	o.wire = append(w, args...)
}

// wakeArg is the op's wake prefix argument: "" for none.
func (o *Op) wakeArg() any {
	if o.Wake == nil {
		return ""
	}
	return o.Wake
}

// FenceKey is the key of the lock key's fence counter, in the same Cluster
// slot.
func FenceKey(key string) string { return key + ":fence" }

// Source is the Lua source of the op's script.
func (o *Op) Source() string { return o.script().src.(string) }

// SHA is the SHA1 of the op's script, as EVALSHA names it.
func (o *Op) SHA() string { return o.script().sha.(string) }

// EvalArgs returns the op's arguments for node i as an EVAL of the script's
// source, for a node that answered NOSCRIPT (EVAL also caches it).
func (o *Op) EvalArgs(i int) []any {
	argv := slices.Clone(o.Args(i))
	argv[0], argv[1] = "eval", o.script().src
	return argv
}

// Args returns the op's arguments for node i: shared, but for a fenced
// acquire, whose residue is the node's own.
func (o *Op) Args(i int) []any {
	if o.Kind != OpAcquireFenced {
		return o.wire
	}
	argv := slices.Clone(o.wire)
	argv[o.residue] = i
	return argv
}
