package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
// ARGV[1] token, ARGV[2] value, ARGV[3] ttl in ms.
// Reply: 1 created; 2 we held it already (re-entry), value and TTL refreshed;
// refused: {−(holder's PTTL + 1), holder's token}, where 0 means the
// holder's key has no TTL, −1 a PTTL of 0 ms, −101 a PTTL of 100 ms. The
// holder's token lets a waiter tell a holder with a majority from a split
// vote; it never leaves the library.
const acquireSrc = `
local v = redis.call('GET', KEYS[1])
if not v then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 2
end
local nul = string.find(v, '\0', 1, true)
if nul then v = string.sub(v, 1, nul - 1) end
return {-1 - redis.call('PTTL', KEYS[1]), v}
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
// ARGV[1] token, ARGV[2] cooldown in ms (0: delete now).
// Reply: 1 released; 0 key absent (expired); −1 another token holds it.
const releaseSrc = `
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
if ARGV[2] == '0' then
	redis.call('DEL', KEYS[1])
	redis.call('PUBLISH', KEYS[1] .. ':released', ARGV[1])
else
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`

// inspectSrc reads the key's value and PTTL in one atomic step.
// Reply: {value or nil, PTTL}.
const inspectSrc = `return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}`

// opKind names an operation; it indexes scripts.
type opKind int

const (
	opAcquire opKind = iota
	opExtend
	opRelease
	opInspect
)

// script is a Lua script with its SHA1, boxed once so that building a call's
// arguments does not allocate for them.
type script struct {
	src, sha any
}

var scripts = func() [4]script {
	var s [4]script
	for k, src := range [...]string{opAcquire: acquireSrc, opExtend: extendSrc, opRelease: releaseSrc, opInspect: inspectSrc} {
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
	argv              [7]any        // EVALSHA sha 1 key args…
	argc              int
}

func newOp(kind opKind, key, token, value string, ttl time.Duration) *op {
	o := &op{kind: kind, key: key, token: token, value: value, ttl: ttl}
	o.argv[0], o.argv[1], o.argv[2], o.argv[3] = "evalsha", scripts[kind].sha, 1, key
	ms := ttl.Milliseconds()
	switch kind {
	case opAcquire:
		o.argv[4], o.argv[5], o.argv[6], o.argc = token, value, ms, 7
	case opExtend, opRelease:
		o.argv[4], o.argv[5], o.argc = token, ms, 6
	case opInspect:
		o.argc = 4
	}
	return o
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
	status status
	pttl   time.Duration // statusHeld from acquire or inspect: holder's remaining TTL, −1 if none
	value  string        // statusHeld: the holder's token (acquire) or the key's value (inspect)
	err    error         // statusFailed only
}

func (r result) ok() bool { return r.status == statusOK || r.status == statusRefreshed }

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
	cmd := redis.NewCmd(ctx, o.argv[:o.argc]...)
	_ = n.client.Process(ctx, noRetry{cmd})
	if err := cmd.Err(); err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT")) {
		argv := slices.Clone(o.argv[:o.argc])
		argv[0], argv[1] = "eval", scripts[o.kind].src
		cmd = redis.NewCmd(ctx, argv...)
		_ = n.client.Process(ctx, noRetry{cmd})
	}
	switch o.kind {
	case opInspect:
		return inspectReply(cmd.Slice())
	case opAcquire:
		return acquireReply(cmd.Result())
	}
	r, err := cmd.Int64()
	if err != nil {
		return result{err: err}
	}
	return ownerReply(r)
}

func acquireReply(reply any, err error) result {
	if err != nil {
		return result{err: err}
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
		if len(r) == 2 {
			code, ok1 := r[0].(int64)
			holder, ok2 := r[1].(string)
			switch {
			case !ok1 || !ok2 || code > 0:
			case code == 0:
				return result{status: statusHeld, pttl: -1, value: holder}
			default:
				return result{status: statusHeld, pttl: time.Duration(-code-1) * time.Millisecond, value: holder}
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
	if len(reply) != 2 {
		return result{err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	pttl, ok := reply[1].(int64)
	if !ok {
		return result{err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	value, held := reply[0].(string)
	switch {
	case !held:
		return result{status: statusAbsent}
	case pttl < 0:
		return result{status: statusHeld, pttl: -1, value: value}
	}
	return result{status: statusHeld, pttl: time.Duration(pttl) * time.Millisecond, value: value}
}

// encodeValue is the key's value for a holder: the token, then NUL and the
// metadata when there is any.
func encodeValue(token, metadata string) string {
	if metadata == "" {
		return token
	}
	return token + "\x00" + metadata
}
