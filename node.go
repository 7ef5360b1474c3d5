package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the wire protocol with one node. Every operation is one Lua
// script, so each is atomic on the node and costs one round trip: EVALSHA,
// falling back to EVAL when the node answers NOSCRIPT. (go-redis's
// Script.Run does the same, but cannot turn off go-redis's own retries; see
// noRetry.)
//
// A lock is one string key. Its value is the holder's token, followed by a
// NUL byte and the holder's metadata when there is any, so ownership is "the
// value is the token, or starts with token+NUL". Tokens never contain NUL.
//
// Only GET, SET, PTTL, PEXPIRE and DEL touch the key: a key of another type
// makes GET fail with WRONGTYPE, the script stops, and the foreign key is
// left as it was.

// The scripts. Each takes the lock key as KEYS[1].

// acquireSrc takes the lock or re-enters it.
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl in ms, ARGV[4] known run_ids
// (see runIDCheck).
// Reply: 1 created; 2 we held it already (re-entry), value and TTL refreshed;
// refused: {−(holder's PTTL + 1), holder's token}, where 0 means the
// holder's key has no TTL, −1 a PTTL of 0 ms, −101 a PTTL of 100 ms. The
// holder's token lets a waiter tell a holder with a majority from a split
// vote; it never leaves the library.
const acquireSrc = runIDCheck + `
local v = redis.call('GET', KEYS[1])
if not v then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return reply(1)
end
if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return reply(2)
end
local nul = string.find(v, '\0', 1, true)
if nul then v = string.sub(v, 1, nul - 1) end
return reply({-1 - redis.call('PTTL', KEYS[1]), v})
`

// runIDCheck starts the acquire scripts, for the restart guard: it defines
// reply, which every exit goes through. The last ARGV lists the run_ids the
// client knows; empty, the guard is off. If the node's run_id is among them
// the reply is unchanged, so the common case costs an INFO server call but
// no larger reply; if not (first contact, or the node restarted), the reply
// is wrapped: {'runid', run_id, reply}. INFO runs before anything is
// written: a user whose ACL forbids it gets an error and no key.
const runIDCheck = `
local newid
if ARGV[#ARGV] ~= '' then
	local id = string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
	if not (id and string.find(ARGV[#ARGV], id, 1, true)) then newid = id or '' end
end
local function reply(r)
	if newid then return {'runid', newid, r} end
	return r
end
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

// releaseSrc deletes a key we hold and publishes the token on the key's
// release channel (KEYS[1]..":released") for waiters; or, with a cooldown,
// leaves the key in place to expire cooldown ms from now, keeping other
// tokens out until then.
// ARGV[1] token, ARGV[2] cooldown in ms (0: delete now), ARGV[3] 1 to
// publish (an Unlock), 0 not (taking back a failed attempt's grants, which
// released no lock anyone held).
// Reply: 1 released; 0 key absent (expired); −1 another token holds it.
const releaseSrc = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
if ARGV[2] == '0' then
	redis.call('DEL', KEYS[1])
	if ARGV[3] == '1' then redis.call('PUBLISH', KEYS[1] .. ':released', ARGV[1]) end
else
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`

// acquireFencedSrc is acquireSrc that also hands out a fencing token: on a
// grant it advances the key's fence counter (KEYS[2], no TTL) to the next
// value that is ≡ residue (mod modulus), so that values from different nodes
// never coincide. The counter is checked before anything is written (a script
// that fails half-way keeps its writes).
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl ms, ARGV[4] residue, ARGV[5]
// modulus, ARGV[6] known run_ids (see runIDCheck).
// Reply: {1 or 2 (as acquire), fence}; refused: as acquire; an error reply
// when the counter is not a number or would reach 2^53.
const acquireFencedSrc = runIDCheck + `
local v = redis.call('GET', KEYS[1])
local code = 1
if v then
	if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
		code = 2
	else
		local nul = string.find(v, '\0', 1, true)
		if nul then v = string.sub(v, 1, nul - 1) end
		return reply({-1 - redis.call('PTTL', KEYS[1]), v})
	end
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if not c or c < 0 or c ~= math.floor(c) then
	return redis.error_reply('FENCE redlock: fence counter ' .. KEYS[2] .. ' is not a whole number')
end
local m = tonumber(ARGV[5])
local f = c + ((tonumber(ARGV[4]) - c - 1) % m) + 1
if f >= 9007199254740992 then
	return redis.error_reply('FENCE redlock: fence counter ' .. KEYS[2] .. ' would pass 2^53')
end
redis.call('SET', KEYS[2], string.format('%.0f', f))
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return reply({code, f})
`

// fenceWriteSrc writes a fencing token back: counter = max(counter, t). It
// acknowledges only if the counter was ≤ t: a larger value means a later
// holder has already been handed a larger token.
// KEYS[1] fence key, ARGV[1] t. Reply: 1 acknowledged; 0 a larger fence exists.
const fenceWriteSrc = `
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if not c then
	return redis.error_reply('FENCE redlock: fence counter ' .. KEYS[1] .. ' is not a whole number')
end
if c > tonumber(ARGV[1]) then return 0 end
if c < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
return 1
`

// inspectSrc reads the key's value and PTTL, and its fence counter, in one
// atomic step. KEYS[2] fence key. Reply: {value or nil, PTTL, counter or nil}.
const inspectSrc = `return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}`

// opKind names an operation; it indexes scripts.
type opKind int

const (
	opAcquire opKind = iota
	opExtend
	opRelease
	opInspect
	opAcquireFenced
	opFenceWrite
)

// fenceModulus: node i's fence counter only takes values ≡ i (mod 64), so at
// most 64 nodes. Every client must list the nodes in the same order.
const fenceModulus = 64

// maxFence: fencing tokens stay below 2^53, exact in every JSON number and
// in Lua, whose numbers are doubles.
const maxFence = 1 << 53

// script is a Lua script with its SHA1, boxed once so that building a call's
// arguments does not allocate for them.
type script struct {
	src, sha any
}

var scripts = func() [6]script {
	var s [6]script
	for k, src := range [...]string{opAcquire: acquireSrc, opExtend: extendSrc, opRelease: releaseSrc, opInspect: inspectSrc,
		opAcquireFenced: acquireFencedSrc, opFenceWrite: fenceWriteSrc} {
		s[k] = script{src: src, sha: redis.NewScript(src).Hash()}
	}
	return s
}()

// op is one operation on one key, prepared once per round and sent to every
// node: the wire arguments are built once and shared (go-redis only reads
// them).
type op struct {
	kind              opKind
	key, token, value string
	ttl               time.Duration // TTL, or cooldown for release
	fence             int64         // opFenceWrite: the token to write back
	argv              [11]any       // EVALSHA sha numkeys keys… args…
	argc              int
	guard             *restartGuard // acquire ops: checks the nodes' run_ids
}

// newOp prepares an op. For acquire ops, runIDs is the boxed list of known
// run_ids (the empty string with the restart guard off).
func newOp(kind opKind, key, token, value string, ttl time.Duration) *op {
	o := &op{kind: kind, key: key, token: token, value: value, ttl: ttl}
	o.argv[0], o.argv[1], o.argv[2], o.argv[3] = "evalsha", scripts[kind].sha, 1, key
	ms := ttl.Milliseconds()
	switch kind {
	case opAcquire:
		o.argv[4], o.argv[5], o.argv[6], o.argv[7], o.argc = token, value, ms, "", 8
	case opExtend:
		o.argv[4], o.argv[5], o.argc = token, ms, 6
	case opRelease: // publishes; see quiet
		o.argv[4], o.argv[5], o.argv[6], o.argc = token, ms, 1, 7
	case opInspect:
		o.argv[2], o.argv[4], o.argc = 2, fenceKey(key), 5
	case opAcquireFenced: // the residue (ARGV[4]) is per node: see nodeArgs
		o.argv[2], o.argv[4] = 2, fenceKey(key)
		o.argv[5], o.argv[6], o.argv[7], o.argv[8], o.argv[9], o.argv[10], o.argc = token, value, ms, 0, fenceModulus, "", 11
	}
	return o
}

// quiet makes a release op publish no notice.
func (o *op) quiet() *op {
	o.argv[6] = 0
	return o
}

// withGuard makes an acquire op report run_ids to g.
func (o *op) withGuard(g *restartGuard) *op {
	if g != nil {
		o.guard = g
		o.argv[o.argc-1] = g.known()
	}
	return o
}

// newFenceWrite prepares the write-back of fencing token t for key.
func newFenceWrite(key string, t int64) *op {
	o := &op{kind: opFenceWrite, key: key, fence: t}
	o.argv[0], o.argv[1], o.argv[2], o.argv[3], o.argv[4], o.argc = "evalsha", scripts[opFenceWrite].sha, 1, fenceKey(key), t, 5
	return o
}

// fenceKey is the key of the lock key's fence counter, in the same Cluster
// slot.
func fenceKey(key string) string { return key + ":fence" }

// nodeArgs returns the op's arguments for node i: shared, but for a fenced
// acquire, whose residue is the node's own.
func (o *op) nodeArgs(i int) []any {
	if o.kind != opAcquireFenced {
		return o.argv[:o.argc]
	}
	argv := o.argv
	argv[8] = i
	return argv[:o.argc]
}

// noRetry marks a command go-redis must not re-send by itself. A re-sent
// script whose first run took effect would misreport: a created key as
// "ours already", a release as "already expired". Redlock retries whole
// attempts instead, and a node that fails just counts as failed.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// status is one node's answer to one operation.
type status int8

const (
	statusFailed    status = iota // the node failed or did not answer; see result.err
	statusOK                      // acquire created the key; extend or release succeeded
	statusRefreshed               // acquire found our own token (re-entry) and refreshed it
	statusHeld                    // another token holds the key
	statusAbsent                  // extend or release found no key: it had expired
)

// result is one node's outcome.
type result struct {
	// answered: the node's call returned within its round, with an answer
	// or an error. A node not answered yet when the round was decided has
	// neither answered nor err; one that missed the round's deadline has
	// err and not answered.
	answered bool
	status   status
	pttl     time.Duration // statusHeld from acquire or inspect: holder's remaining TTL, −1 if none
	value    string        // statusHeld: the holder's token (acquire) or the key's value (inspect)
	fence    int64         // a fenced acquire's grant: the node's new fence counter
	runID    string        // acquire: the node's run_id, when it was not among those known
	// guarded: a grant from a node that restarted within the restart guard's
	// period; it does not count towards a majority, but its key is ours.
	guarded bool
	err     error // statusFailed only
}

func (r result) ok() bool { return !r.guarded && (r.status == statusOK || r.status == statusRefreshed) }

// undecided reports whether the node had not answered when its round was
// decided: its reply is handled when it comes.
func (r result) undecided() bool { return !r.answered && r.err == nil }

// releaseSuffix ends the channel on which a key's releases are published.
const releaseSuffix = ":released"

// node is everything the library asks of one Redis master.
type node interface {
	do(ctx context.Context, o *op) result
	name() string
	// watch subscribes to the release channels matching pattern and calls
	// deliver for each notice until stop is called; stop waits for the
	// subscription's goroutine to end.
	watch(pattern string, deliver func(channel, payload string)) (stop func())
}

// redisNode is a node behind a go-redis client: standalone, Sentinel
// failover or Cluster.
type redisNode struct {
	client redis.UniversalClient
	addr   string
	index  int // position in the Client's list: the node's fence residue
}

var _ node = (*redisNode)(nil)

func (n *redisNode) name() string { return n.addr }

// watch runs one pattern subscription on the node. go-redis reconnects it
// by itself after a failure; notices published meanwhile are lost, which the
// waiters' timers cover.
func (n *redisNode) watch(pattern string, deliver func(channel, payload string)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var mu sync.Mutex
	var ps *redis.PubSub
	go func() {
		defer close(done)
		sub := n.client.PSubscribe(ctx, pattern) // may block on a frozen node
		mu.Lock()
		ps = sub
		stopped := ctx.Err() != nil
		mu.Unlock()
		if stopped {
			_ = sub.Close()
			return
		}
		for m := range sub.Channel() {
			deliver(m.Channel, m.Payload)
		}
	}()
	return func() {
		cancel()
		mu.Lock()
		if ps != nil {
			_ = ps.Close() // ends the Channel loop
		}
		mu.Unlock()
		<-done
	}
}

// do runs the op's script with EVALSHA, and with EVAL (which also caches
// it) when the node answers NOSCRIPT, e.g. after SCRIPT FLUSH or a restart.
func (n *redisNode) do(ctx context.Context, o *op) result {
	args := o.nodeArgs(n.index)
	cmd := redis.NewCmd(ctx, args...)
	_ = n.client.Process(ctx, noRetry{cmd})
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		argv := slices.Clone(args)
		argv[0], argv[1] = "eval", scripts[o.kind].src
		cmd = redis.NewCmd(ctx, argv...)
		_ = n.client.Process(ctx, noRetry{cmd})
	}
	switch o.kind {
	case opInspect:
		return inspectReply(cmd.Slice())
	case opAcquire, opAcquireFenced:
		return acquireReply(cmd.Result())
	}
	r, err := cmd.Int64()
	if err != nil {
		return result{err: err}
	}
	if o.kind == opFenceWrite {
		return fenceWriteReply(r)
	}
	return ownerReply(r)
}

// errLargerFence: a fence write-back found a larger token: a later holder
// has been handed one.
var errLargerFence = errors.New("redlock: a larger fencing token exists")

func fenceWriteReply(r int64) result {
	switch r {
	case 1:
		return result{status: statusOK}
	case 0:
		return result{err: errLargerFence}
	}
	return result{err: fmt.Errorf("unexpected fence write-back reply %d", r)}
}

func acquireReply(reply any, err error) result {
	if err != nil {
		return result{err: err}
	}
	if r, ok := reply.([]any); ok && len(r) == 3 && r[0] == "runid" { // see runIDCheck
		id, _ := r[1].(string)
		res := acquireReply(r[2], nil)
		res.runID = id
		return res
	}
	switch r := reply.(type) {
	case int64:
		switch r {
		case 1:
			return result{status: statusOK}
		case 2:
			return result{status: statusRefreshed}
		}
	case []any:
		if len(r) != 2 {
			break
		}
		code, ok := r[0].(int64)
		if !ok {
			break
		}
		switch second := r[1].(type) {
		case int64: // fenced grant: {1 or 2, fence}
			switch {
			case second <= 0 || second >= maxFence:
			case code == 1:
				return result{status: statusOK, fence: second}
			case code == 2:
				return result{status: statusRefreshed, fence: second}
			}
		case string: // refusal: {−(PTTL+1), holder}
			switch {
			case code == 0:
				return result{status: statusHeld, pttl: -1, value: second}
			case code < 0:
				return result{status: statusHeld, pttl: time.Duration(-code-1) * time.Millisecond, value: second}
			}
		}
	}
	return result{err: fmt.Errorf("unexpected acquire reply %v", reply)}
}

// ownerReply decodes the 1 / 0 / −1 replies of extend and release.
func ownerReply(r int64) result {
	switch r {
	case 1:
		return result{status: statusOK}
	case 0:
		return result{status: statusAbsent}
	case -1:
		return result{status: statusHeld}
	}
	return result{err: fmt.Errorf("unexpected reply %d", r)}
}

func inspectReply(reply []any, err error) result {
	if err != nil {
		return result{err: err}
	}
	if len(reply) < 2 || len(reply) > 3 { // a nil counter may end the array
		return result{err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	pttl, ok := reply[1].(int64)
	if !ok {
		return result{err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	var fence int64
	if len(reply) == 3 {
		if s, ok := reply[2].(string); ok {
			if fence, err = strconv.ParseInt(s, 10, 64); err != nil {
				return result{err: fmt.Errorf("fence counter %q is not a number", s)}
			}
		}
	}
	value, held := reply[0].(string)
	switch {
	case !held:
		return result{status: statusAbsent, fence: fence}
	case pttl < 0:
		return result{status: statusHeld, pttl: -1, value: value, fence: fence}
	}
	return result{status: statusHeld, pttl: time.Duration(pttl) * time.Millisecond, value: value, fence: fence}
}

// encodeValue is the key's value for a holder: the token, then NUL and the
// metadata when there is any.
func encodeValue(token, metadata string) string {
	if metadata == "" {
		return token
	}
	return token + "\x00" + metadata
}
