package wire

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
	redis.call('ZREMRANGEBYSCORE', r, '-inf', string.format('%d', t))
	local last = redis.call('ZRANGE', r, '-1', '-1', 'WITHSCORES')[2]
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
// writer holds the key and no live writer waits ahead of it in the key's
// queue (for a reader not queued: anywhere in it). Readers queue among
// writers (a reader's place ID marks it: see queueLua), so the readers
// ahead of a writer enter together, before it, and those behind it after
// it: neither side starves. A reader that a release let in here (its
// place's ID among the readers) enters whoever waits; its token joins the
// let-in, which it does not take over: the Client counts let-ins whose
// notices come after a failed attempt, whose take-back releases only the
// token (the let-in goes with a release of the place's ID, which a reader
// that holds by its attempt sends every node, or with its lapse).
// ARGV[1] token, ARGV[2] value (unused: readers keep no metadata),
// ARGV[3] ttl in ms, ARGV[4..6] the reader's place (ID, ticket, lease ms)
// as acquireSrc's; a reader not queued passes none.
// Reply: 1 added; 2 the token was a live reader already (its lease
// renewed); refused: acquireSrc's {−(PTTL + 1), writer's token}, or the
// queue's {−(lease left + 1), "" (no holder), the first writer waiting ahead}.
var readAcquireSrc = queueLua + `
local id, ticket = ARGV[4] or '', ARGV[5] or '0'
local q, l = qkeys()
local t = now()
if letsIn(id) and tonumber(redis.call('ZSCORE', KEYS[1] .. ':readers', id) or '0') > t then
	-- let in here by a release, as its place: it is in already, whoever waits now (its let-in keeps
	-- writers out), and its token joins the let-in, which stays: should the attempt fail, its
	-- take-back releases the token, and the Client may yet hold by the let-ins (their notices late)
	local r, ttl = KEYS[1] .. ':readers', tonumber(ARGV[3])
	redis.call('ZADD', r, string.format('%d', t + ttl), ARGV[1])
	if redis.call('PTTL', r) < ttl then redis.call('PEXPIRE', r, string.format('%d', ttl)) end
	leave(q, l, id)
	forget(KEYS[1], id)
	return 1
end
-- A queued reader's place is put back where the node lost it (so that it
-- is ordered by its ticket), and otherwise refreshed only where the reader
-- is refused: one let in leaves the queue.
local stale = ticket ~= '0'
if stale and not redis.call('ZSCORE', q, id) then
	enqueue(q, l, t, id, ticket, tonumber(ARGV[6]))
	stale = false
end
local function refuse(reply)
	if stale then enqueue(q, l, t, id, ticket, tonumber(ARGV[6])) end
	return reply
end
local v = redis.call('GET', KEYS[1])
if v and string.byte(v) ~= 0 then -- a writer holds (a reservation is the queue's, checked below)
	if ticket ~= '0' then mark(KEYS[1], v) end -- our place waits for it
	local nul = string.find(v, '\0', 1, true)
	if nul then v = string.sub(v, 1, nul - 1) end
	return refuse({-1 - redis.call('PTTL', KEYS[1]), v})
end
local r = KEYS[1] .. ':readers'
redis.call('ZREMRANGEBYSCORE', r, '-inf', string.format('%d', t)) -- lapsed readers go (readersLua's readers(t) would read the longest lease too)
local mine = redis.call('ZSCORE', r, ARGV[1])
if not mine and (ticket ~= '0' or redis.call('EXISTS', q) == 1) then
	local w, left = writerAhead(q, l, t, id)
	if w then return refuse({-1 - left, '', w}) end
	if ticket ~= '0' then
		leave(q, l, id)
		if letsIn(id) then forget(KEYS[1], id) end -- and its look's number
	end
	if v and not head(q, l, t) then redis.call('DEL', KEYS[1]) end -- the queue's reservation, with nobody left in it
end
local ttl = tonumber(ARGV[3])
redis.call('ZADD', r, string.format('%d', t + ttl), ARGV[1])
if redis.call('PTTL', r) < ttl then redis.call('PEXPIRE', r, string.format('%d', ttl)) end
if mine then return 2 end
return 1
`

// queueReadSrc is queueSrc for a reader: it joins or refreshes the
// reader's place, or with ticket 0 takes it out (waking the new front of
// the queue, as queueSrc does), and reports whether the reader may enter.
// ARGV as queueSrc's, and ARGV[5], from a reader that a release may let in
// (see queueLua's letIn), the look's number, kept in KEYS[1]..":seq"
// beside the place until a release lets it in, and named then. Reply: {the reader's ID when no live writer waits
// ahead of it, else that writer; the lease left of whichever it names
// (ms); the writer's key's PTTL (−2: no writer holds)}, or {LetIn, its
// lease left, −2} for a reader a release let in (see queueLua), whose
// look then puts no place back. Live readers are no holders to a reader.
var queueReadSrc = queueLua + readersLua + `
local q, l = qkeys()
local t = now()
local id = ARGV[1]
if ARGV[2] ~= '0' and letsIn(id) then -- let in by a release: its look refreshes nothing
	local u = tonumber(redis.call('ZSCORE', KEYS[1] .. ':readers', id) or '0')
	if u > t then return {'\3in', u - t, -2} end
end
local first = ARGV[2] == '0' and head(q, l, t) -- the head a leave may wake the next of
if ARGV[2] == '0' then
	leave(q, l, id)
	forget(KEYS[1], id) -- (a reader that entered by its attempt, but a node refused it)
else
	enqueue(q, l, t, id, ARGV[2], tonumber(ARGV[3]))
end
if ARGV[5] and ARGV[2] ~= '0' and redis.call('ZADD', KEYS[1] .. ':seq', ARGV[5], id) == 1 then
	redis.call('PEXPIRE', KEYS[1] .. ':seq', string.format('%d', 2 * tonumber(ARGV[3])))
end
local h, left = head(q, l, t)
local pttl = redis.call('PTTL', KEYS[1])
local rv = pttl ~= -2 and redis.call('GET', KEYS[1])
local reserved = rv and string.byte(rv) == 0
local since = reserved and string.sub(rv, 2) or '' -- the release the key has been free since
if reserved then pttl = -2 end
if ARGV[2] ~= '0' then mark(KEYS[1], rv) end
local busy = pttl == -2 and redis.call('EXISTS', KEYS[1] .. ':readers') == 1 and readers(t) > 0
if pttl == -2 and not busy and h then
	reserve(left, nil, since)
elseif reserved and not h then
	redis.call('DEL', KEYS[1])
end
if ARGV[2] == '0' then
	if first == id and h and pttl == -2 and (isReader(h) or not busy) then wakeFront(ARGV[4], h, id, nil, since) end
	return {h or '', left, pttl}
end
local w, wl = h, left -- a live writer at the head is the first ahead of id (writerAhead's answer, without its scan)
if not h or h == id or isReader(h) then w, wl = writerAhead(q, l, t, id) end
if w then return {w, wl, pttl} end
return {id, tonumber(ARGV[3]), pttl}
`

// readExtendSrc renews a live reader's lease; it never re-adds a lapsed
// one. ARGV[1] token, ARGV[2] ttl in ms.
// Reply: 1 extended; 0 the reader is gone (its lease lapsed).
const readExtendSrc = nowLua + `
local r = KEYS[1] .. ':readers'
local t = now()
local s = redis.call('ZSCORE', r, ARGV[1])
if not s or tonumber(s) <= t then return 0 end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', r, string.format('%d', t + ttl), ARGV[1])
if redis.call('PTTL', r) < ttl then redis.call('PEXPIRE', r, string.format('%d', ttl)) end
return 1
`

// readReleaseSrc takes a reader out (and, for a place's ID that a
// release may have let in, the place too, handing on a reservation made
// for it: see queueLua). With a cooldown its lease is set to
// end cooldown ms from now instead, keeping writers out until then. The
// last live reader to leave, with the key free, wakes the first waiter of
// the key's queue (a writer), as releaseSrc does, but in the name of all
// readers (readersLeft for the token): each node's last reader may be
// another, and the waiter's Client wakes it at each such notice.
// ARGV[1] token, ARGV[2] cooldown in ms (0: now), ARGV[3] the wake
// channels' prefix ("": wake nobody).
// Reply: 1 released, or {1, first waiter} when it woke one; 0 the reader
// was gone.
var readReleaseSrc = nowLua + placeOutLua(".ri", queueFnsLua) + `
local r = KEYS[1] .. ':readers'
local t = now()
local s = redis.call('ZSCORE', r, ARGV[1])
if not s or tonumber(s) <= t then
	redis.call('ZREM', r, ARGV[1])
	return 0
end
local cooldown = tonumber(ARGV[2])
if cooldown > 0 then
	redis.call('ZADD', r, string.format('%d', t + cooldown), ARGV[1])
	if redis.call('PTTL', r) < cooldown then redis.call('PEXPIRE', r, string.format('%d', cooldown)) end
	return 1
end
redis.call('ZREM', r, ARGV[1])
-- The queue first: a release with none (the uncontended one) reads no
-- more, and defines the queue's functions only when it finds one.
if ARGV[3] ~= '' and redis.call('EXISTS', KEYS[1] .. ':queue') == 1 then
` + queueFnsLua + readersLua + `
	if readers(t) == 0 and keyFree() then
		local q, l = qkeys()
		local h, left = head(q, l, t)
		local meta = h and grants(h) and not elects(h) and valueOf(h) -- (false: woken)
		if h and grants(h) and not ARGV[4] and meta ~= false then -- the writer after the last reader takes the key
			grant(ARGV[3], q, l, h, left, nil, nil, meta)
			return {1, h}
		end
		if h then
			wakeFront(ARGV[3], h, '\1readers')
			return {1, h}
		end
	end
end
return 1
`

// LetIn stands for the released token in a notice that a writer's release
// let the reader named in, by its place's ID (see queueLua's wakeFront),
// and for the head in a reader's look that finds it let in.
const LetIn = "\x03in"

// ReadersLeft stands for the released token in a notice that the last
// reader left a node (see readReleaseSrc).
const ReadersLeft = "\x01readers"

// acquireWriteSrc is acquireSrc for a read-write lock's writer: a free key
// is granted only where no reader holds (see readersLua); otherwise the
// refusal is {−(the readers' longest lease left + 1), ReadersHolder}.
var acquireWriteSrc = acquireScript(readersIf(4))

// acquireWriteFencedSrc is acquireFencedSrc for a read-write lock's
// writer, refused while readers hold, as acquireWriteSrc is.
var acquireWriteFencedSrc = acquireFencedScript(readersIf(7), "")

// readScripts are a reader's; writeScripts a writer's, where they differ
// from a mutex holder's: a writer extends and releases as a mutex does.
var (
	readScripts  = scriptSet{OpAcquire: readAcquireSrc, OpExtend: readExtendSrc, OpRelease: readReleaseSrc, OpQueue: queueReadSrc}
	writeScripts = scriptSet{OpAcquire: acquireWriteSrc, OpAcquireFenced: acquireWriteFencedSrc}
)
