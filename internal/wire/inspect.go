package wire

// inspectSrc reads the key's value and PTTL, its fence counter, its wait
// queue (the places whose lease has not lapsed, the first of them among
// the first 64 by ticket, and how many of those 64 are readers' places)
// and its live readers (a read-write lock), in one atomic step. It writes
// nothing: a lapsed place or reader stays until a script that writes drops
// it. KEYS[2] fence key. Reply: {value or nil, PTTL, counter (a string) or nil,
// waiters, first waiter or nil, readers, readers waiting}.
const inspectSrc = counterLua + `
local waiting, first, readers, rwaiting = 0, false, 0, 0
local q, l, r = KEYS[1] .. ':queue', KEYS[1] .. ':lease', KEYS[1] .. ':readers'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', r) == 1 then
	readers = redis.call('ZCOUNT', r, '(' .. now, '+inf')
end
if redis.call('EXISTS', q) == 1 then
	waiting = redis.call('ZCOUNT', l, '(' .. now, '+inf')
	for _, id in ipairs(redis.call('ZRANGE', q, '0', '63')) do
		if tonumber(redis.call('ZSCORE', l, id) or '0') > now then
			first = first or id
			if string.find(id, '.r', 1, true) then rwaiting = rwaiting + 1 end
		end
	end
end
local v, p = redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])
if v and string.byte(v) == 0 then v, p = false, -2 end -- reserved for the queue: nobody holds it
local c = counter(KEYS[2])
if not c then c = '?' elseif c == 0 then c = false else c = string.format('%.0f', c) end
return {v, p, c, waiting, first, readers, rwaiting}
`
