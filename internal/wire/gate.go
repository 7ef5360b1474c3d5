package wire

// This file is the queue's gate: who may take a free key (gateLua, the
// acquire scripts' branch that calls it), and putting a refused waiter's
// place back.

import "fmt"

// gateLua decides whether a free key may be granted: gate returns nil when
// it may (and takes the waiter's entry out of the queue), or the refusal
// {−(head's lease left + 1), "", head}. A waiter with a ticket (not '0')
// is first where its entry heads the queue, or where its ticket comes
// before the head's: its entry, if the node had it, lapsed (or the node
// lost it), and putting it back would have made it the head. A waiter
// that is not first has its entry put back (or refreshed) where its
// ticket says. A tie with the head's ticket is ordered by ID, as the
// queue orders it (Lua's string order follows the node's locale). id is
// "" and ticket '0' for a caller not queued (a first attempt).
//
// The first waiter, granted, so costs no enqueue: 5 commands instead of
// 10 to 12 (TIME, ZRANGE, ZSCORE, ZREM twice), on every node, at every
// hand-off (when the nodes' CPU is what a contended key waits for).
//
// The scripts define these functions only where they use them, inside the
// branch that needs the queue: a Lua function definition runs each time the
// script does, and the uncontended path (a free key and no queue, or a
// release that finds no queue) pays one EXISTS and no more.
const gateLua = precedesLua + `
local function gate(id, ticket, lease)
	local q, l = qkeys()
	local t = now()
	local h, left = head(q, l, t)
	if ticket ~= '0' and h ~= id then
		local before = not h or precedes(q, h, ticket)
		if before then return nil end
		enqueue(q, l, t, id, ticket, tonumber(lease))
		if before == nil then h, left = head(q, l, t) end -- a tie: the queue's order
	end
	if h and h ~= id then
		reserve(ticket ~= '0' and math.max(left, tonumber(lease)) or left, nil, since)
		return {-1 - left, '', h}
	end
	if h then
		leave(q, l, h)
		if grants(h) then forget(KEYS[1], h) end -- (a place a release may grant, that won by its attempt)
	end
	return nil
end
`

// precedesLua defines precedes(q, h, ticket), the gates' (gateLua,
// gateAllLua): whether a waiter's ticket comes before the entry h's in
// queue q, nil for a tie (which the queue orders by ID). Apart from
// queueLua, so that the scripts that never grant by the queue do not
// define it on every run.
const precedesLua = `
local function precedes(q, h, ticket)
	local a, b = tonumber(ticket), tonumber(redis.call('ZSCORE', q, h))
	if a == b then return nil end
	return a < b
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
		queued = redis.call('EXISTS', KEYS[1] .. ':queue') == 1 -- others wait: the grant is marked
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
		mark(KEYS[1], v)
	end
`
}
