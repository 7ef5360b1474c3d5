package wire

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
if not v or string.byte(v) == 0 then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
redis.call('PUBLISH', KEYS[1] .. ':leader', ARGV[3])
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return 1
`
