package wire

// ownedLua defines owned(v): whether a key's value v is ARGV[1]'s, the
// token's (the token alone, or followed by NUL and metadata).
const ownedLua = `
local function owned(v) return v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' end
`

// expireAtLua defines expireAt(ms): the node's time (TIME) plus ms, as
// SET's PXAT takes it (an extension sets each key again to its value, so
// that the scripts need no command beyond those the ACL in
// docs/operations.md allows). A multi-key lock's keys on one node get one
// expiry, so that they expire together: with PX each SET reads the
// clock again, and keys set a millisecond apart expired a millisecond
// apart, when a reader could see part of the set (the chaos test's node
// reader did, once in about fifty CI runs). The node's clock at the
// script's start is no later than its clock at each SET, so no key lives
// shorter than with PX.
const expireAtLua = `
local function expireAt(ms)
	local t = redis.call('TIME')
	return string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ms))
end
`

// extendMultiSrc is extendSrc for a multi-key lock's keys (KEYS): it
// extends only when every key is ours.
// Reply: 1 extended; 0 a key absent (expired); −1 another token holds a
// key.
const extendMultiSrc = ownedLua + expireAtLua + `
local st, vs = 1, {}
for i, k in ipairs(KEYS) do
	local v = redis.call('GET', k)
	if not v or string.byte(v) == 0 then st = 0 elseif not owned(v) then return -1 end
	vs[i] = v
end
if st == 0 then return 0 end
local at = expireAt(ARGV[2])
for i, k in ipairs(KEYS) do redis.call('SET', k, vs[i], 'PXAT', at) end
return 1
`

// releaseMultiSrc is releaseSrc for a multi-key lock's keys (KEYS): it
// releases the keys that are ours even when another is not, as releaseSrc
// releases one: each key with a live first waiter is left Reserved for its
// queue, and that waiter woken, or granted the key where it may be (a
// writer's or a set's place: see queueLua's grant), but by a hand-over or
// a take-back (ARGV[4]). A token that is a set's place's ID (a set
// granted its keys by releases) takes that place out of every key's
// queue too, and its looks' numbers, but where the set gives back its
// grants (ARGV[6] '1': Op.KeepPlace). It reads a key's queue only where
// its value is Queued (see Queued), as releaseSrc does: the uncontended
// release is a GET and a DEL per key.
// Reply: 1 released, or {1, a first waiter} when a key's queue had one
// (the first key's, in KEYS order); 0 a key absent (expired); −1 another
// token holds a key.
var releaseMultiSrc = ownedLua + expireAtLua + markLua + placeOutLua(".wi", queueLua) + `
local st, mine, vs = 1, {}, {}
for _, k in ipairs(KEYS) do
	local v = placeSeen and placeSeen[k] or redis.call('GET', k)
	if not v or string.byte(v) == 0 then
		if st == 1 then st = 0 end
	elseif owned(v) then
		mine[#mine + 1] = k
		vs[#mine] = v
	else
		st = -1
	end
end
if ARGV[2] ~= '0' then
	local at = expireAt(ARGV[2])
	for i, k in ipairs(mine) do redis.call('SET', k, vs[i], 'PXAT', at) end
	return st
end
local queued, any = {}, false -- which keys' values are Queued (a place joined while we held it): a key released changes no other's
for i in ipairs(mine) do
	queued[i] = marked(vs[i]) or ARGV[6] == '1' -- (a set that gives back its grants keeps its place, which its look put back unmarked: queueMultiSrc)
	any = any or queued[i]
end
if not any then
	for _, k in ipairs(mine) do redis.call('DEL', k) end
	return st
end
` + queueLua + `
local plan = {} -- by key of mine with a live first waiter: its queue's keys, the waiter and its lease left, its kept value, and whether the release grants it the key; read before any is granted
for i, k in ipairs(mine) do
	if queued[i] then
		local q, l = qkeys(k)
		local h, left = head(q, l, now())
		if h then
			local meta = grants(h) and not elects(h) and valueOf(h, k) -- (false: woken)
			plan[i] = {q = q, l = l, h = h, left = left, meta = meta, granted = ARGV[3] ~= '' and grants(h) and not ARGV[4] and meta ~= false}
		end
	end
end
local function restOf(x, i) -- for grantRest at key i: the keys before it this release grants set x; false where it grants x a key after it too (its rest waits for that one)
	local skip = {}
	for j, o in ipairs(mine) do
		if plan[j] and plan[j].granted and plan[j].h == x then
			if j > i then return false end
			skip[o] = true
		end
	end
	return skip
end
local named = false
for i, k in ipairs(mine) do
	local p = plan[i]
	if p and p.granted then
		local h = p.h
		if isSet(h) then grantRest(ARGV[3], h, k, restOf(h, i)) end -- (their notices first)
		grant(ARGV[3], p.q, p.l, h, p.left, k, nil, p.meta)
	elseif p then
		reserve(p.left, k, ARGV[3] ~= '' and ARGV[1] or nil)
		if ARGV[3] ~= '' then wakeFront(ARGV[3], p.h, ARGV[1], k) end
	else
		redis.call('DEL', k)
	end
	named = named or p and p.h
end
if named and st == 1 then return {1, named} end
return st
`

// multiLua defines free(), the check of a multi-key acquire: it returns
// nil when no key (KEYS) is held by another token, with whether every key
// is ours already, or the refusal of acquireSrc for the first key, in
// KEYS order, that another token holds, with that key's place in KEYS
// (from 1): {−(PTTL + 1), holder's token, i}, so that a caller tells two
// holders of one key (a split vote) from holders of two (see retryHint).
// It writes nothing: a key of another type fails the script here, before
// any write. A Reserved key is free here (the queue's gate decides), as
// is a key a release granted to the caller's place, id (see queueLua's
// grant), and the third result says whether one was: an unqueued set reads the queues
// only then, so that an uncontended set costs a GET and a SET per key, as
// the one-key script; it jumps a queue only where the plain SET NX of a
// one-key Lock would (docs/design.md, "The uncontended acquire").
const multiLua = ownedLua + grantedLua + `
local function free(id)
	local own, reserved = 0, false
	for i, k in ipairs(KEYS) do
		local v = redis.call('GET', k)
		if v and string.byte(v) ~= 0 and not grantedTo(v, id) then
			if not owned(v) then
				local nul = string.find(v, '\0', 1, true)
				if nul then v = string.sub(v, 1, nul - 1) end
				return {-1 - redis.call('PTTL', k), v, i}
			end
			own = own + 1
		elseif v then
			reserved = true
		end
	end
	return nil, own == #KEYS, reserved
end
`

// grantedLua defines grantedTo(v, id): whether a key's value v (false:
// none) is a release's grant to the place id (see queueLua's grant).
const grantedLua = `
local function grantedTo(v, id)
	return id ~= '' and v and (v == id or string.sub(v, 1, #id + 1) == id .. '\0') or false
end
`

// acquireMultiSrc takes every key of a multi-key lock (KEYS) or none: it
// sets them all only when no other token holds any, and no key's wait
// queue has a live first waiter but the caller (see gateAllLua).
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl ms, ARGV[4..6] the waiter
// (ID, ticket, lease ms) as acquireSrc's; a caller not queued passes none.
// Reply: 1 set; 2 every key was ours already (re-entry), all refreshed;
// refused: acquireSrc's {−(PTTL + 1), holder's token} for the first key
// held by another token, or the queue's {−(lease left + 1), "" (no
// holder), first waiter} for the first key whose queue has another first
// waiter.
var acquireMultiSrc = acquireMultiScript(false)

// acquireMultiFencedSrc is acquireMultiSrc that also hands out one fencing
// token (see fenceLua) above every key's counter (k..":fence"), and sets
// them all to it: a multi-key lock's token is larger than any handed out
// before for any of its keys, alone or with others.
// ARGV[1..9] as acquireFencedSrc's. Reply: as acquireFencedSrc's.
var acquireMultiFencedSrc = acquireMultiScript(true)

// acquireMultiScript is the multi-key acquire, fenced or not. A queued
// set's place is in every key's queue: one ID and one ticket, so that
// every node orders it against every other waiter of each of its keys the
// same way, and the lowest ticket is first on all of its keys (nobody
// holds a key while waiting for another: no deadlock). Re-entry (every key
// ours) skips the queues, as acquireSrc's does.
func acquireMultiScript(fenced bool) string {
	argv := 4
	pre, grant := multiLua+expireAtLua+markLua, `
local at = expireAt(ARGV[3])
for i, k in ipairs(KEYS) do redis.call('SET', k, queued[i] and addMark(ARGV[2]) or ARGV[2], 'PXAT', at) end
if again then return 2 end
return 1
`
	if fenced {
		argv = 7
		pre += fenceLua
		grant = `
local counters = {}
for i, k in ipairs(KEYS) do counters[i] = k .. ':fence' end
local f = fence(counters)
if type(f) == 'table' then return f end
local at = expireAt(ARGV[3])
for i, k in ipairs(KEYS) do
	setCounter(counters[i], string.format('%.0f', f))
	redis.call('SET', k, queued[i] and addMark(ARGV[2]) or ARGV[2], 'PXAT', at)
end
if again then return {2, f} end
return {1, f}
`
	}
	id, ticket, lease := placeArgv(argv)
	return pre + `
local refused, again, reserved = free(` + id + `)
local queued = {} -- by key: places are left in its queue, or it was ours and marked: the value is marked (Queued)
if (reserved or ` + ticket + ` ~= '0') and not again then
` + queueLua + gateAllLua + `
	local r = gateAll(` + id + `, ` + ticket + `, ` + lease + `, refused)
	if r then return r end
	for i, k in ipairs(KEYS) do queued[i] = redis.call('EXISTS', k .. ':queue') == 1 end
elseif refused then
	return refused
elseif again then
	for i, k in ipairs(KEYS) do queued[i] = marked(redis.call('GET', k)) end
end` + grant
}

// gateAllLua defines gateAll(id, ticket, lease, refused), the wait queues'
// part of a multi-key acquire: a queued caller (ticket not '0') is first
// on a key as gateLua says, and where it is refused its place is put back
// in (or refreshed in) every key's queue, so that a set granted costs no
// enqueue. It returns refused (another token holds a key: free's refusal)
// if given, else the queue's refusal for the first key whose first waiter
// is not the caller; then every free key with a live first waiter is kept
// Reserved for it (see queueLua). Otherwise it takes the caller's place
// out of every queue and returns nil: the set may be granted.
const gateAllLua = precedesLua + `
local function gateAll(id, ticket, lease, refused)
	local t = now()
	local hs, lefts, stale = {}, {}, {}
	for i, k in ipairs(KEYS) do
		local q, l = qkeys(k)
		local h, left = head(q, l, t)
		local placed = false
		if ticket ~= '0' and h ~= id then
			local before = not h or precedes(q, h, ticket)
			if before then
				h = id -- first here (see gateLua)
			else
				enqueue(q, l, t, id, ticket, tonumber(lease))
				placed = true
				if before == nil then h, left = head(q, l, t) end -- a tie: the queue's order
			end
		end
		stale[i] = ticket ~= '0' and h == id and not placed
		hs[i], lefts[i] = h, left
		if hs[i] and hs[i] ~= id and not refused then refused = {-1 - lefts[i], '', hs[i]} end
	end
	for i, k in ipairs(KEYS) do
		local q, l = qkeys(k)
		if refused then
			if stale[i] then -- first here, but refused: its place is kept, refreshed
				enqueue(q, l, t, id, ticket, tonumber(lease))
				lefts[i] = tonumber(lease)
			end
			local v = hs[i] and redis.call('GET', k)
			local ours = grantedTo(v, id) -- granted to our place: refused, the grant goes, as the gate's would
			if ticket ~= '0' and not ours then mark(k, v) end -- our place waits for its holder, if any
			local keep = ticket ~= '0' and math.max(lefts[i], tonumber(lease)) or lefts[i] -- its own place is refreshed too
			if hs[i] and (not v or string.byte(v) == 0 or ours) then reserve(keep, k, v and not ours and string.sub(v, 2)) end
		else
			leave(q, l, id)
			if grants(id) then forget(k, id) end
		end
	end
	return refused
end
`

// queueMultiSrc is queueSrc over every key of a set (KEYS): it joins or
// refreshes the waiter's place in every key's queue, or with ticket 0
// takes it out of each (waking the new first waiter of each key it was
// first on, where the key is free), and keeps each free key with a live
// first waiter Reserved for it.
// ARGV as queueSrc's. Reply: as queueSrc's, over the set: {the waiter's
// ID when it is first on every key, else the first waiter of the first
// key (in KEYS order) it is not first on; that first waiter's lease left
// ms; −2 when every key is free, else the longest PTTL of the keys held
// (−1 if one has none); the token that holds the first key held (in KEYS
// order), "" if none; which keys are held, a '1' or '0' for each key, in
// KEYS order; the token that holds each key, "" where none does, each
// followed by a NUL, in KEYS order; per key, in KEYS order, 'g' where
// the key is granted to the set's place, 'f' where the set is first in
// the key's queue, '-' otherwise}. The holder is what lets a set's
// waiter tell a split vote from a holder (see splitSeen): each node names
// the first key it has held, so a key held on a majority by one token is
// named so by that majority, and contenders' grants on their way out by
// no token on a majority. Until 2026-11-27 a set's look named no holder,
// and a set refused by a split vote that looked like holders of
// different keys slept its strategy's delay with its keys free
// (simulator seeds 5687 and 21031; TestSetLockAfterSplit). Each key's
// holder tells the same of every key: a set that a release left waiting
// for another key looks again soon only where that key was split
// (notice.go, lookSoon). The last field tells a set whose grants can
// never make a majority (a release that granted different waiters on
// different nodes) to give them back, where it is not the one first on
// the nodes that granted others (grantsStuck; docs/design.md, "A set's
// grants split too").
//
// ARGV[5], from a set a release may grant its keys (a ".wi" place: see
// queueLua's grant): the look's number, kept in each key's KEY:seq beside
// the place, as queueSrc keeps it. A key such a look finds granted to
// the place it answers as free with the set first; the place is put back
// in its queue all the same, and while it is first there the grant is
// made to live as long as the place (a lease from now), so that a key
// granted while the set waits for another (held for longer than a lease)
// stays the set's, as the reservation it replaced did: not taken by a
// waiter that queued after the set (simulator seed 319), nor by an
// unqueued attempt once the grant lapsed (seed 10899). A lower ticket
// whose place reached the node after the grant (so first there now)
// stops the renewal, and has the key within a lease: two sets each
// granted a key of the other's wait no longer than that.
var queueMultiSrc = queueLua + `
local t = now()
local id, leaving = ARGV[1], ARGV[2] == '0'
local seq = not leaving and ARGV[5] -- a set a release may grant its keys: its look's number
local first, left, pttl, holder, waits, holders, mine = id, 0, -2, '', {}, {}, {}
local keys = seq and isSet(id) and table.concat(KEYS, '\0') .. '\0'
for i, k in ipairs(KEYS) do
	local q, l = qkeys(k)
	local v = redis.call('GET', k)
	local was = leaving and head(q, l, t) -- the head a leave may wake the next of
	if leaving then leave(q, l, id) else enqueue(q, l, t, id, ARGV[2], tonumber(ARGV[3])) end
	if seq and redis.call('ZADD', k .. ':seq', seq, id) == 1 then
		redis.call('PEXPIRE', k .. ':seq', string.format('%d', 2 * tonumber(ARGV[3])))
	end
	if seq and isSet(id) then redis.call('SET', k .. ':set:' .. id, keys, 'PX', ARGV[3]) end -- (for a release: grantRest)
	if seq and ARGV[6] and valued(id) then redis.call('SET', k .. ':val:' .. id, ARGV[6], 'PX', ARGV[3]) end -- its metadata, for a release that grants it the key
	if leaving and isSet(id) then forget(k, id) end
	if seq and grantedTo(v, id) then
		-- Granted by a release: free to the set. Its place stays, and
		-- while it is first in line the grant lives as long as it does.
		if head(q, l, t) == id and redis.call('PTTL', k) < tonumber(ARGV[3]) then redis.call('PEXPIRE', k, ARGV[3]) end
		waits[i], holders[i], mine[i] = '0', '', 'g'
	else
		local h, hl = head(q, l, t)
		if not leaving then mark(k, v) end
		local p = v and redis.call('PTTL', k) or -2
		local reserved = v and string.byte(v) == 0
		local since = reserved and string.sub(v, 2) or '' -- the release the key has been free since
		if reserved then p = -2 end
		holders[i] = p ~= -2 and string.match(v, '^[^%z]*') or ''
		if holder == '' then holder = holders[i] end
		if p == -2 and h then
			reserve(leaving and hl or math.max(hl, tonumber(ARGV[3])), k, since)
		elseif reserved and not h then
			redis.call('DEL', k)
		end
		if leaving and was == id and h and p == -2 then wake(ARGV[4], h, id, k, since) end
		if first == id then first, left = h or '', hl end
		if p == -1 or pttl == -1 then pttl = -1 elseif p > pttl then pttl = p end
		waits[i] = (p == -2 and h == id) and '0' or '1'
		mine[i] = h == id and 'f' or '-'
	end
end
return {first, left, pttl, holder, table.concat(waits), table.concat(holders, '\0') .. '\0', table.concat(mine)}
`

// setScripts are a multi-key lock's: its acquires, extend and release go
// over every key of the op's Keys; its fence write-back is the mutex's,
// which takes the keys it is given.
var setScripts = scriptSet{OpAcquire: acquireMultiSrc, OpAcquireFenced: acquireMultiFencedSrc, OpExtend: extendMultiSrc, OpRelease: releaseMultiSrc, OpQueue: queueMultiSrc}
