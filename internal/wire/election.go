package wire

// proclaimSrc replaces the value (token and metadata) of a key we hold,
// keeping its TTL and its mark (Queued), and announces it on the channel KEYS[1]..":leader" (an
// election's leader changes; see election.go). It never re-creates a key.
// The notice goes first: a user whose ACL refuses the channel fails the
// script before anything is written. (Observers read the nodes after a
// notice, and a script runs whole before any read.)
// ARGV[1] token, ARGV[2] new value (starting with the token), ARGV[3] the
// notice's payload.
// Reply: 1 replaced; 0 key absent (expired); −1 another token holds it.
var proclaimSrc = markLua + `
local v = redis.call('GET', KEYS[1])
if not v or string.byte(v) == 0 then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
redis.call('PUBLISH', KEYS[1] .. ':leader', ARGV[3])
redis.call('SET', KEYS[1], marked(v) and addMark(ARGV[2]) or ARGV[2], 'KEEPTTL')
return 1
`

// acquireElectionSrc is acquireFencedSrc for an election's lock (see
// election.go), whose grant also announces the candidate: ARGV[2] is its
// value with the metadata "0.0 VALUE" (not announced), and the key is set
// to it with "TERM.1~" in place of "0.0", TERM being the counter this node
// handed out, and TERM published on KEYS[1]..":leader", as a proclamation
// does. The "~" marks an announcement by grant: each node writes its own
// counter, and only a majority of nodes that show the same TERM says that
// it is the term (the proposal taken on a majority: docs/fencing.md);
// readers believe it no sooner (see election.go). A value in another
// form is stored as it is, and nothing is published.
var acquireElectionSrc = acquireFencedScript("", `
if string.sub(val, #ARGV[1] + 1, #ARGV[1] + 5) == '\0' .. '0.0 ' then
	val = ARGV[1] .. '\0' .. term .. '.1~' .. string.sub(val, #ARGV[1] + 5)
	redis.call('PUBLISH', KEYS[1] .. ':leader', term)
end`)

// electionScripts are an election's, where they differ from a mutex's.
var electionScripts = scriptSet{OpAcquireFenced: acquireElectionSrc}
