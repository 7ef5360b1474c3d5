package wire

// The scripts. Each takes the lock key as KEYS[1].

// The wait queue. Each lock key has, on every node, a queue of waiters:
// KEYS[1]..":queue", a sorted set of waiter IDs scored by ticket (a number
// the waiter chose once, the same on every node), and KEYS[1]..":lease", the
// same IDs scored by the node time (ms) at which the entry lapses unless
// its waiter refreshes it. Both keys carry a TTL of at least the newest
// lease, so a queue whose waiters all died disappears: a place set where
// less than a lease is left sets two leases, so that the next places set
// within a lease leave the TTL alone (one PTTL, not two PEXPIREs more, on
// most looks: a look ran 12 commands, now 10). A dead queue's keys so
// outlive its last place by up to a lease; every script reads lapsed
// places as gone. (The queue keys share the lock key's hash tag, so
// Cluster nodes have them in its slot.)
//
// While the queue holds a live entry, a free key is granted only to the
// waiter at its head (the lowest ticket; equal tickets by ID), or to the
// holder re-entering. The queue only decides who may try: a grant is still
// the key set to the holder's token on a majority.
//
// A free key with a live queue is not left absent: a release, an acquire
// refused by the queue, and a look at the queue that finds the key free
// (and no readers: a read-write lock's) set it to Reserved (a NUL, which
// no token starts with) for as long as the first place's lease has left
// (a script that refreshes a place, as a look does, but for a reader's:
// for that place's lease, if longer, so that a first place that lapses
// leaves the key kept for the waiters that looked behind it; a leave cuts
// it back, a writer's also while readers hold); each look renews it so,
// or deletes it when the queue is empty. Every
// script reads Reserved as a free key, and so the queue's gate decides who
// may take it; only a plain SET NX, the uncontended acquire
// (OpAcquirePlain), reads it as held, which is what keeps that acquire,
// which never looks at the queue, from jumping it. A reservation is never
// a grant: it starts with a NUL, so no holder counts it, and a script that
// takes the key overwrites it.
//
// A release that wakes a waiter reserves the key with its own token after
// the NUL: the release the key has been free since, which the scripts that
// renew the reservation keep. A waiter that leaves from the front of such a
// queue wakes the next one twice: in its own name, as before, and in the
// name of that release. The next waiter's Client counts notices by the
// token they name (a majority of one release), and the nodes that the
// leave reached after the release, and those where the release found the
// leaver gone and named the next waiter itself, then count together: a
// semaphore's waiter that took another slot used to leave the next waiter
// without a majority of either, asleep until its next look.
//
// queueLua is the functions the scripts that touch the queue share: head
// drops lapsed entries from the front and returns the first live one with
// its lease left (ms), enqueue adds or refreshes an entry, reserve sets the
// key to Reserved (and since, if any) for the head's lease left (or
// deletes it, for 0),
// keyFree reads a key as free when it is absent or Reserved, wake tells a
// waiter's Client that the waiter is first and the key free (and, with
// since, also in the name of that release), grantedTo (grantedLua) reads
// a key as granted to a place, grantRest grants a set the keys beside the
// one released where each is free with the set first. A waiter ID is
// its Client's ID, '.', and a number; each Client listens on one channel,
// the wake prefix (by default "redlock:wake:") followed by its ID, so a
// release reaches only the process whose waiter is first.
//
// A read-write lock's readers queue too: a reader's ID has 'r' before its
// number (isReader), and readers ahead of a writer in the queue are served
// together, before it (see readAcquireSrc). wakeFront wakes the first
// waiter and, when it is a reader, every reader after it up to the first
// live writer (at most 64 places); a reader whose ID has 'ri' (letsIn: a
// Client that understands it, and a reader without a token of its own) it
// lets in instead (letIn): the place's ID joins the readers, scored by the
// place's lapse, the place leaves the queue, and the reader's Client is
// told with LetIn for the token; a reservation made for a place let in
// passes to the next place. writerAhead finds the first live writer ahead
// of a place (of any place, for "": an unqueued reader), among the first
// 64.
//
// A writer whose ID has 'wi' (grants: a one-key mutex's waiter that the
// Client lets a release grant the key) a mutex's release grants the key
// instead of waking it (grant): the key is set to the place's ID (marked
// while places are left), until the place's lapse; the place and its
// look's number leave, and its Client is told with LetIn and that number.
// A fenced waiter's ID has 'wif' (fenced): a one-key release that hands
// it a fencing token names the token in the notice, after the number and
// an 'f' (releaseSrc); a grant without one only keeps the key for the
// waiter's attempt, which takes it (acquireFencedScript) and gets one. A
// waiter with metadata has 'wim' ('wifm' fenced, 'wism' a set's: valued); its looks keep
// the metadata in KEYS[1]..":val:"..ID (queueSrc's ARGV[6]), a grant sets
// the key to the ID, NUL and the metadata and ends the notice's number
// with a 'v' (valueOf, grant), and where the value is gone the waiter is
// woken instead.
const queueLua = nowLua + queueFnsLua

// nowLua defines now(), the node's time in ms: the one function of
// queueLua that scripts outside the queue use (a reader's extend and
// release), which define it alone and the rest only where they touch the
// queue: each definition runs each time the script does (about 40 ns).
const nowLua = `
local nowMS -- read once: a script sees one time (as Redis's expiry sees one)
local function now()
	if not nowMS then
		local t = redis.call('TIME')
		nowMS = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	end
	return nowMS
end
`

// markLua defines marked(v), whether a holder's value v carries Queued
// (see Queued), and addMark(v), v with it (v unmarked). The scripts that
// set a key to a holder's value use them: a grant that leaves places in
// the key's queue, and one that keeps a value's mark (re-entry, a
// proclamation).
const markLua = `
local function marked(v)
	local nul = string.find(v, '\0', 1, true)
	return nul ~= nil and string.byte(v, nul + 1) == 2
end
local function addMark(v)
	local nul = string.find(v, '\0', 1, true)
	if not nul then return v .. '\0\2' end
	return string.sub(v, 1, nul) .. '\2' .. string.sub(v, nul + 1)
end
`

// queueFnsLua is queueLua but for now(), which must be defined before it.
const queueFnsLua = markLua + grantedLua + `
local function isReader(id) return string.find(id, '.r', 1, true) ~= nil end
local function letsIn(id) return string.find(id, '.ri', 1, true) ~= nil end
local function grants(id) return string.find(id, '.wi', 1, true) ~= nil end
local function fenced(id) return string.find(id, '.wif', 1, true) ~= nil end
local function isSet(id) return string.find(id, '.wis', 1, true) ~= nil end
local function elects(id) return string.find(id, '.wie', 1, true) ~= nil end
local function valued(id) return elects(id) or string.find(id, '%.wi[fs]?m') ~= nil end -- its looks keep a value for its grant (KEY:val:ID)
local function mark(k, v) -- k's value v, if a holder's: marked, since its queue has a place
	if v and string.byte(v) ~= 0 and not marked(v) then redis.call('SET', k, addMark(v), 'KEEPTTL') end
end
local function qkeys(k)
	k = k or KEYS[1]
	return k .. ':queue', k .. ':lease'
end
local function head(q, l, t)
	while true do
		local h = redis.call('ZRANGE', q, '0', '0')[1]
		if not h then return false, 0 end
		local until_ = tonumber(redis.call('ZSCORE', l, h) or '0')
		if until_ > t then return h, until_ - t end
		redis.call('ZREM', q, h)
		redis.call('ZREM', l, h)
		redis.call('ZREM', string.sub(q, 1, -7) .. ':seq', h) -- (its look's number, if a release could name it)
		if valued(h) then redis.call('DEL', string.sub(q, 1, -7) .. ':val:' .. h) end -- (the value it kept)
	end
end
local function enqueue(q, l, t, id, ticket, lease)
	redis.call('ZADD', q, ticket, id)
	redis.call('ZADD', l, string.format('%d', t + lease), id)
	if redis.call('PTTL', l) < lease then
		local ms = string.format('%d', 2 * lease)
		redis.call('PEXPIRE', q, ms)
		redis.call('PEXPIRE', l, ms)
		redis.call('PEXPIRE', string.sub(q, 1, -7) .. ':seq', ms) -- (none but a let-in reader's)
	end
end
local function leave(q, l, id)
	redis.call('ZREM', q, id)
	redis.call('ZREM', l, id)
end
local function reserve(left, k, since)
	if left > 0 then redis.call('SET', k or KEYS[1], '\0' .. (since or ''), 'PX', string.format('%d', left)) else redis.call('DEL', k or KEYS[1]) end
end
local function keyFree(k)
	local v = redis.call('GET', k or KEYS[1])
	return not v or string.byte(v) == 0
end
local function handOn(q, l, t, k) -- a reservation made for a place that left is the next place's, or goes
	local v = redis.call('GET', k or KEYS[1])
	if v and string.byte(v) == 0 then
		local _, left = head(q, l, t)
		reserve(left, k, string.sub(v, 2))
	end
end
local function wake(prefix, id, token, k, since)
	local client = string.match(id, '^[^.]*')
	redis.call('PUBLISH', prefix .. client, (k or KEYS[1]) .. '\0' .. token .. '\0' .. id)
	if since and since ~= '' and since ~= token then
		redis.call('PUBLISH', prefix .. client, (k or KEYS[1]) .. '\0' .. since .. '\0' .. id)
	end
end
local function forget(k, x) -- place x's look number, set's keys and value at k go
	redis.call('ZREM', k .. ':seq', x)
	if isSet(x) then redis.call('DEL', k .. ':set:' .. x) end
	if valued(x) then redis.call('DEL', k .. ':val:' .. x) end
end
local function valueOf(x, k) -- the value place x kept at k for a grant: nil where it keeps none; false where it should and it is gone (or a candidate's is not "0.0 VALUE")
	if not valued(x) then return nil end
	local v = redis.call('GET', (k or KEYS[1]) .. ':val:' .. x)
	if v and elects(x) and string.sub(v, 1, 4) ~= '0.0 ' then v = nil end
	return v or false
end
local function admitted(prefix, q, l, x, k, fence, valueSet) -- place x leaves, and its Client is told it is in, naming its look (and the fence; 'v': its value set)
	leave(q, l, x)
	local n = redis.call('ZSCORE', k .. ':seq', x) -- the look that set the lapse, or one before it
	if n or valued(x) then forget(k, x) elseif isSet(x) then redis.call('DEL', k .. ':set:' .. x) end -- (its :seq key may have lapsed between looks)
	if fence then n = (n or '') .. 'f' .. fence end
	if valueSet then n = (n or '') .. 'v' end
	redis.call('PUBLISH', prefix .. string.match(x, '^[^.]*'), k .. '\0\3in' .. (n or '') .. '\0' .. x)
end
local function grant(prefix, q, l, x, left, k, fence, meta) -- writer x takes the free key k, until its place's lapse (its value: x, and NUL and meta where given)
	k = k or KEYS[1]
	admitted(prefix, q, l, x, k, fence, meta and true) -- (the script's writes are seen together)
	local v = meta and x .. '\0' .. meta or x
	redis.call('SET', k, redis.call('EXISTS', q) == 1 and addMark(v) or v, 'PX', string.format('%d', left))
end
local function grantRest(prefix, x, k, skip) -- set x, granted k: its other keys too, if each is free here with x first (skip: those this script grants x itself; false: none here, a later key of the release grants x)
	if skip == false then return end
	local ks = redis.call('GET', k .. ':set:' .. x) -- its keys, each followed by a NUL (its looks keep them)
	if not ks then return end
	local t, rest, from = now(), {}, 1
	while from <= #ks do
		local to = string.find(ks, '\0', from, true)
		local o = string.sub(ks, from, to - 1)
		from = to + 1
		if o ~= k and not (skip and skip[o]) then
			local v = redis.call('GET', o)
			local ours = grantedTo(v, x)
			if v and string.byte(v) ~= 0 and not ours then return end -- held: the set waits on
			local q, l = qkeys(o)
			if not ours or redis.call('ZSCORE', q, x) then -- (granted, and not back in line: nothing to do)
				local h, left = head(q, l, t)
				if h ~= x and not ours then return end -- not first there: the queue decides
				if h == x then -- (granted before and back in line: granted again, naming a later look)
					local meta = valueOf(x, o)
					if meta == false then return end -- its metadata not kept here (its look keeps it with the place, so hardly ever): its look or attempt takes the key
					rest[#rest + 1] = {o, q, l, left, meta}
				end
			end
		end
	end
	for _, r in ipairs(rest) do grant(prefix, r[2], r[3], x, r[4], r[1], nil, r[5]) end
end
local function letIn(prefix, q, l, x, u, t, k) -- reader x enters, until its place's lapse u
	k = k or KEYS[1]
	local r = k .. ':readers'
	redis.call('ZADD', r, string.format('%d', u), x)
	if redis.call('PTTL', r) < u - t then redis.call('PEXPIRE', r, string.format('%d', u - t)) end
	admitted(prefix, q, l, x, k)
end
local function wakeFront(prefix, h, token, k, since)
	if not isReader(h) then return wake(prefix, h, token, k, since) end
	local q, l = qkeys(k)
	local t = now()
	local let = false
	for _, x in ipairs(redis.call('ZRANGE', q, '0', '63')) do
		local u = tonumber(redis.call('ZSCORE', l, x) or '0')
		if u > t then
			if not isReader(x) then break end
			if letsIn(x) then
				letIn(prefix, q, l, x, u, t, k)
				let = true
			else
				wake(prefix, x, token, k, since)
			end
		end
	end
	if let then handOn(q, l, t, k) end
end
local function writerAhead(q, l, t, id)
	for _, x in ipairs(redis.call('ZRANGE', q, '0', '63')) do
		if x == id then return false, 0 end
		if not isReader(x) then
			local u = tonumber(redis.call('ZSCORE', l, x) or '0')
			if u > t then return x, u - t end
		end
	end
	return false, 0
end
`

// placeOutLua is the start of a release of a token that may be a place's
// ID, marked by marker (".ri": a reader a release may let in; ".wi": a
// writer or a set a release may grant the key): the place goes from each
// key's queue (KEYS: one, or a set's), with its look's number, so that
// no later release lets it in or grants it the key again, and a
// reservation made for it is the next place's. fns defines handOn
// (queueLua, or queueFnsLua after nowLua), where a place is found. A place
// that was first, the key free, wakes the next, as a leave from the front
// does (queueSrc): a semaphore's waiter that took one slot released its
// place in the other, just reserved for it by a take-back, and the next
// waiter slept until its look (simulator seed 2496). A set that gives
// back its grants keeps its place (ARGV[6], see Op.KeepPlace).
func placeOutLua(marker, fns string) string {
	return `
local placeMoved = false -- a place of the token's was queued: its leave may have changed the key
local placeSeen -- by key: its value, read where the place was queued and the key held (and so left as it was); nil: none
if string.find(ARGV[1], '` + marker + `', 1, true) and ARGV[6] ~= '1' then
	for _, k in ipairs(KEYS) do -- (one, but a set's)
		-- its look's number, a set's keys and a candidate's value go, queued or not (a leave or a lapse took the place, and left them)
		redis.call('ZREM', k .. ':seq', ARGV[1])
		if string.find(ARGV[1], '.wis', 1, true) then redis.call('DEL', k .. ':set:' .. ARGV[1]) end
		if string.find(ARGV[1], '.wie', 1, true) or string.find(ARGV[1], '%.wi[fs]?m') then redis.call('DEL', k .. ':val:' .. ARGV[1]) end
		local queued = redis.call('ZSCORE', k .. ':queue', ARGV[1])
		local held = queued and redis.call('GET', k)
		if held and string.byte(held) ~= 0 then -- the key held (by the releaser, mostly): the leave hands nothing on
			redis.call('ZREM', k .. ':queue', ARGV[1])
			redis.call('ZREM', k .. ':lease', ARGV[1])
			placeSeen = placeSeen or {}
			placeSeen[k] = held
		elseif queued then -- the key free or Reserved
` + fns + `
			placeMoved = true
			local q, l, t = k .. ':queue', k .. ':lease', now()
			local first = head(q, l, t)
			leave(q, l, ARGV[1])
			handOn(q, l, t, k)
			local v = first == ARGV[1] and ARGV[3] ~= '' and redis.call('GET', k)
			if v and string.byte(v) == 0 then -- it was first, the key free: the next is, as after a leave
				local h = head(q, l, t)
				if h then wakeFront(ARGV[3], h, ARGV[1], k, string.sub(v, 2)) end
			end
		end
	end
end
`
}

// queueSrc joins or refreshes a waiter's entry, or with ticket 0 takes it
// out, and reports the queue and the key.
// ARGV[1] waiter ID, ARGV[2] ticket (0: leave), ARGV[3] lease ms.
// Reply: {head or "", head's lease left ms, the key's PTTL (−2: no key),
// the holder's token ("" when free), 1 when every place ahead of the
// waiter's (among the first 64) is of the waiter's own Client, else 0 (a
// leave: 0); it costs a command only where the head is of the waiter's
// Client and not the waiter}; where the key is free but readers
// hold (a read-write lock), the readers' longest lease left stands for
// the PTTL. A waiter that leaves from the head of the queue while the key is free
// publishes {ID, NUL, new head} on the key's release channel, as a release
// does, so that the new head need not wait for its timer. ARGV[5], from a
// writer a release may grant the key (see queueLua's grant): the look's
// number, kept in KEYS[1]..":seq" beside the place; such a writer's look
// that finds the key granted to it answers {LetIn, PTTL, −2}, and puts no
// place back. ARGV[6], from a waiter with metadata ('.wim', '.wifm') or
// an election's candidate (a place a release may grant the key with its
// announcement: '.wie'): its metadata (a candidate's: "0.0 " and its
// value), kept in KEYS[1]..":val:"..ID until the place's lapse, for the
// release that grants it (releaseSrc).
var queueSrc = queueLua + readersLua + `
local v = redis.call('GET', KEYS[1]) -- (nothing below sets the key before it is read)
if ARGV[2] ~= '0' and grants(ARGV[1]) and v and (v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0') then
	return {'\3in', redis.call('PTTL', KEYS[1]), -2} -- granted the key by a release: its look puts no place back
end
local q, l = qkeys()
local t = now()
local first = ARGV[2] == '0' and head(q, l, t) -- the head a leave may wake the next of
if ARGV[2] == '0' then
	leave(q, l, ARGV[1])
	forget(KEYS[1], ARGV[1]) -- (a place that won by its attempt, but a node refused it)
else
	enqueue(q, l, t, ARGV[1], ARGV[2], tonumber(ARGV[3]))
end
if ARGV[5] and ARGV[2] ~= '0' and redis.call('ZADD', KEYS[1] .. ':seq', ARGV[5], ARGV[1]) == 1 then
	redis.call('PEXPIRE', KEYS[1] .. ':seq', string.format('%d', 2 * tonumber(ARGV[3])))
end
if ARGV[6] and ARGV[2] ~= '0' and valued(ARGV[1]) then -- its value, for a release that grants it (releaseSrc)
	redis.call('SET', KEYS[1] .. ':val:' .. ARGV[1], ARGV[6], 'PX', ARGV[3]) -- (it lives no longer than the place)
end
local h, left = head(q, l, t)
local reserved = v and string.byte(v) == 0
local pttl = v and not reserved and redis.call('PTTL', KEYS[1]) or -2 -- (free: no key, or Reserved)
local since = reserved and string.sub(v, 2) or '' -- the release the key has been free since
if reserved then v, pttl = false, -2 end
if ARGV[2] ~= '0' then mark(KEYS[1], v) end
local writerFree = pttl == -2
if writerFree and redis.call('EXISTS', KEYS[1] .. ':readers') == 1 then
	local r = readers(t)
	if r > 0 then pttl = r end
end
if pttl == -2 and h then
	reserve(ARGV[2] == '0' and left or math.max(left, tonumber(ARGV[3])), nil, since)
elseif reserved and (not h or ARGV[2] == '0') then -- a leave while readers hold: what the leaver's look set goes
	reserve(h and left or 0, nil, since)
end
if ARGV[2] == '0' and first == ARGV[1] and h and (pttl == -2 or writerFree and isReader(h)) then
	wakeFront(ARGV[4], h, ARGV[1], nil, since)
end
if v then v = string.match(v, '^[^%z]*') else v = '' end
local own = 0 -- a look: 1 if every place ahead of the waiter's is its own Client's
if ARGV[2] ~= '0' and h then
	local client = string.match(ARGV[1], '^[^.]*') .. '.'
	if h == ARGV[1] then
		own = 1
	elseif string.sub(h, 1, #client) == client then -- else no command more
		for _, x in ipairs(redis.call('ZRANGE', q, '1', '63')) do
			if x == ARGV[1] then own = 1 break end
			if string.sub(x, 1, #client) ~= client then break end
		end
	end
end
return {h or '', left, pttl, v, own}
`
