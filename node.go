package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// noRetry marks a command go-redis must not re-send by itself. A re-sent
// script whose first run took effect would misreport: a created key as
// "ours already", a release as "already expired". Redlock retries whole
// attempts instead, and a node that fails just counts as failed.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// Status is one node's answer to one operation.
type Status int8

const (
	statusFailed    Status = iota // the node failed or did not answer; see result.err
	StatusOK                      // acquire created the key; extend or release succeeded
	StatusRefreshed               // acquire found our own token (re-entry) and refreshed it
	StatusHeld                    // another token holds the key
	StatusAbsent                  // extend or release found no key: it had expired
	StatusQueued                  // acquire found the key free, but another waiter first in its queue
)

// Result is one node's outcome.
type Result struct {
	// Answered: the node's call returned within its round, with an answer
	// or an error. A node not Answered yet when the round was decided has
	// neither Answered nor err; one that missed the round's deadline has
	// err and not Answered.
	Answered bool
	Status   Status
	PTTL     time.Duration // statusHeld: holder's remaining TTL, −1 if none; statusQueued: the first waiter's lease left
	Value    string        // statusHeld: the holder's token (acquire) or the key's value (inspect)
	Fence    int64         // a fenced acquire's grant: the node's new fence counter
	RunID    string        // acquire: the run_id of the server that answered, when known (see stream.prepare)
	// Guarded: a grant from a node that restarted within the restart guard's
	// period; it does not count towards a majority, but its key is ours.
	Guarded bool
	// Head: the first waiter in the key's queue, from a queue op, a
	// refusal (statusQueued), a release or an inspect; its lease left is
	// pttl when the key is free (statusQueued, or a queue op's
	// statusAbsent).
	Head    string
	Waiting int   // inspect: the live places in the key's queue
	Readers int   // inspect: the live readers of a read-write lock
	Err     error // statusFailed only
}

func (r Result) OK() bool { return !r.Guarded && (r.Status == StatusOK || r.Status == StatusRefreshed) }

// Undecided reports whether the node had not answered when its round was
// decided: its reply is handled when it comes.
func (r Result) Undecided() bool { return !r.Answered && r.Err == nil }

// reason is why the node did not agree, for a NodeResult; nil if it did.
func (r Result) reason() error {
	switch {
	case r.OK():
		return nil
	case r.Guarded:
		return ErrNodeRestarted
	case r.Status == StatusHeld:
		return ErrHeld
	case r.Status == StatusQueued:
		return ErrQueued
	case r.Status == StatusAbsent:
		return ErrNoKey
	case r.Undecided():
		return errUndecided
	}
	return r.Err
}

// node is everything the library asks of one Redis master.
type node interface {
	// Start sends c.o to the node and returns at once; the node hands its
	// result to c.r.deliver(c.i, ·) exactly once: when it answered, when
	// the call failed, or when the call ended before it could be sent.
	Start(c Call)
	Name() string
	// Watch subscribes to channel, calls ready once the node has confirmed
	// the subscription (never, if it does not), and calls deliver for each
	// message until stop is called; stop waits for the subscription's
	// goroutine to end.
	Watch(channel string, deliver func(channel, payload string), ready func()) (stop func())
}

// This file is the wire protocol with one node: the node interface, its
// go-redis implementation, and the replies (the scripts themselves, and the
// arguments sent to them, are in script.go; how commands leave, batched, is
// in stream.go). A script goes as EVALSHA, and again as EVAL (which also
// caches it) when the node answers NOSCRIPT, e.g. after SCRIPT FLUSH.
// (go-redis's Script.Run does the same, but cannot turn off go-redis's own
// retries; see noRetry.)

// redisNode is a node behind a go-redis client: standalone, Sentinel
// failover or Cluster.
type redisNode struct {
	client redis.UniversalClient
	addr   string
	index  int
	stream *stream // standalone, Sentinel, or another client: the node's one stream

	// A Cluster node has a stream per shard (master), made when a key
	// first maps to it. A call goes to the stream of the master that owns
	// its key's slot in the client's current map; one the map sent to the
	// wrong shard is redirected through the ClusterClient (stream.send).
	cluster *redis.ClusterClient
	routed  atomic.Bool // a key's master has been found once: the client has a slot map
	mu      sync.Mutex
	shards  map[string]*stream // by master address
	done    <-chan struct{}
	wg      *Background
}

var _ node = (*redisNode)(nil)

func newRedisNode(client redis.UniversalClient, addr string, index int) *redisNode {
	n := &redisNode{client: client, addr: addr, index: index}
	if cc, ok := client.(*redis.ClusterClient); ok {
		n.cluster, n.shards = cc, map[string]*stream{}
		return n
	}
	n.stream = newStream(client, index)
	return n
}

// Bind ties the node's streams to its Client (see stream.Bind). Shards are
// not guarded: a Cluster has no one run_id.
func (n *redisNode) Bind(done <-chan struct{}, wg *Background, guard bool) {
	if n.cluster == nil {
		n.stream.bind(done, wg, guard)
		return
	}
	n.done, n.wg = done, wg
}

func (n *redisNode) Name() string { return n.addr }

func (n *redisNode) Start(c Call) {
	switch {
	case n.cluster == nil:
		n.stream.enqueue(c)
	case !n.routed.Load():
		// Until the ClusterClient has its slot map, finding a key's master
		// loads it, which can block on an unreachable cluster: not in the
		// caller's goroutine, and for a detached call not on a context the
		// caller may cancel.
		ctx := c.Ctx
		if c.Detached {
			ctx = context.WithoutCancel(ctx)
		}
		n.wg.Go(func() { n.route(ctx, c) })
	default:
		// With the slot map loaded, MasterForKey makes no call: ctx is
		// unused (reloads run in the background).
		n.route(c.Ctx, c)
	}
}

// startAll sends calls together: in one batch of a standalone or Sentinel
// node's stream; a Cluster node routes each by its key.
func (n *redisNode) StartAll(calls []Call) {
	if n.cluster == nil {
		n.stream.enqueue(calls...)
		return
	}
	for _, c := range calls {
		n.Start(c)
	}
}

// route sends a call to the stream of the master that owns its key, found
// on ctx.
func (n *redisNode) route(ctx context.Context, c Call) {
	master, err := n.cluster.MasterForKey(ctx, c.Op.Key)
	if err != nil {
		c.To.Deliver(c.Index, Result{Err: err})
		return
	}
	n.routed.Store(true) // the ClusterClient keeps a slot map from now on
	n.shard(master).enqueue(c)
}

// shard returns the stream of one of a Cluster's masters.
func (n *redisNode) shard(master *redis.Client) *stream {
	addr := master.Options().Addr
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.shards[addr]
	if !ok {
		s = newStream(master, n.index)
		s.bind(n.done, n.wg, false)
		s.redirect = n.cluster
		n.shards[addr] = s
	}
	return s
}

// Watch runs one subscription on the node. go-redis reconnects it
// by itself after a failure; notices published meanwhile are lost, which the
// waiters' timers cover.
func (n *redisNode) Watch(channel string, deliver func(channel, payload string), ready func()) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var mu sync.Mutex
	var ps *redis.PubSub
	go func() {
		defer close(done)
		sub := n.client.Subscribe(ctx, channel) // may block on a frozen node
		mu.Lock()
		ps = sub
		stopped := ctx.Err() != nil
		mu.Unlock()
		if stopped {
			_ = sub.Close()
			return
		}
		// Until the node confirms, a message to the channel is lost.
		if _, err := sub.Receive(ctx); err == nil {
			ready()
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

// Decode turns the reply to an op of kind k into a result.
func Decode(k Kind, cmd *redis.Cmd) Result {
	switch k {
	case OpInspect:
		return inspectReply(cmd.Slice())
	case OpAcquire, OpAcquireFenced:
		return acquireReply(cmd.Result())
	case OpQueue:
		return queueReply(cmd.Slice())
	case OpRelease:
		if reply, ok := cmd.Val().([]any); ok { // {1, head}
			if len(reply) == 2 && reply[0] == int64(1) {
				if head, ok := reply[1].(string); ok {
					return Result{Status: StatusOK, Head: head}
				}
			}
			return Result{Err: fmt.Errorf("unexpected release reply %v", reply)}
		}
	}
	r, err := cmd.Int64()
	if err != nil {
		return Result{Err: err}
	}
	if k == OpFenceWrite {
		return fenceWriteReply(r)
	}
	return ownerReply(r)
}

// ErrLargerFence: a fence write-back found a larger token: a later holder
// has been handed one.
var ErrLargerFence = errors.New("redlock: a larger fencing token exists")

func fenceWriteReply(r int64) Result {
	switch r {
	case 1:
		return Result{Status: StatusOK}
	case 0:
		return Result{Err: ErrLargerFence}
	case -1:
		return Result{Status: StatusHeld}
	}
	return Result{Err: fmt.Errorf("unexpected fence write-back reply %d", r)}
}

func acquireReply(reply any, err error) Result {
	if err != nil {
		return Result{Err: err}
	}
	switch r := reply.(type) {
	case int64:
		switch r {
		case 1:
			return Result{Status: StatusOK}
		case 2:
			return Result{Status: StatusRefreshed}
		}
	case []any:
		if len(r) == 3 { // the queue's refusal: {−(head's lease left + 1), '', head}
			code, _ := r[0].(int64)
			head, _ := r[2].(string)
			if code < 0 && head != "" {
				return Result{Status: StatusQueued, Head: head, PTTL: time.Duration(-code-1) * time.Millisecond}
			}
			break
		}
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
			case second <= 0 || second >= MaxFence:
			case code == 1:
				return Result{Status: StatusOK, Fence: second}
			case code == 2:
				return Result{Status: StatusRefreshed, Fence: second}
			}
		case string: // refusal: {−(PTTL+1), holder}
			switch {
			case code == 0:
				return Result{Status: StatusHeld, PTTL: -1, Value: second}
			case code < 0:
				return Result{Status: StatusHeld, PTTL: time.Duration(-code-1) * time.Millisecond, Value: second}
			}
		}
	}
	return Result{Err: fmt.Errorf("unexpected acquire reply %v", reply)}
}

// queueReply decodes a queue op's {head or "", head's lease left ms, key's
// PTTL (−2: no key)}: statusAbsent (the key is free) with the head and its
// lease left as pttl, or statusHeld with the head and the key's PTTL (−1
// when it has none). The poll's judge decides what counts.
func queueReply(reply []any, err error) Result {
	if err != nil {
		return Result{Err: err}
	}
	if len(reply) == 3 {
		head, ok1 := reply[0].(string)
		left, ok2 := reply[1].(int64)
		pttl, ok3 := reply[2].(int64)
		if ok1 && ok2 && ok3 {
			switch {
			case pttl == -2:
				return Result{Status: StatusAbsent, Head: head, PTTL: time.Duration(left) * time.Millisecond}
			case pttl < 0:
				return Result{Status: StatusHeld, Head: head, PTTL: -1}
			}
			return Result{Status: StatusHeld, Head: head, PTTL: time.Duration(pttl) * time.Millisecond}
		}
	}
	return Result{Err: fmt.Errorf("unexpected queue reply %v", reply)}
}

// ownerReply decodes the 1 / 0 / −1 replies of extend and release.
func ownerReply(r int64) Result {
	switch r {
	case 1:
		return Result{Status: StatusOK}
	case 0:
		return Result{Status: StatusAbsent}
	case -1:
		return Result{Status: StatusHeld}
	}
	return Result{Err: fmt.Errorf("unexpected reply %d", r)}
}

func inspectReply(reply []any, err error) Result {
	if err != nil {
		return Result{Err: err}
	}
	if len(reply) < 2 || len(reply) > 6 { // nils may end the array
		return Result{Err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	pttl, ok := reply[1].(int64)
	if !ok {
		return Result{Err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	var fence int64
	if len(reply) >= 3 {
		if s, ok := reply[2].(string); ok {
			if fence, err = strconv.ParseInt(s, 10, 64); err != nil {
				return Result{Err: fmt.Errorf("fence counter %q is not a number", s)}
			}
		}
	}
	res := Result{Status: StatusAbsent, Fence: fence}
	if len(reply) >= 4 {
		n, _ := reply[3].(int64)
		res.Waiting = int(n)
	}
	if len(reply) >= 5 {
		res.Head, _ = reply[4].(string)
	}
	if len(reply) == 6 {
		n, _ := reply[5].(int64)
		res.Readers = int(n)
	}
	if value, held := reply[0].(string); held {
		res.Status, res.Value, res.PTTL = StatusHeld, value, time.Duration(pttl)*time.Millisecond
		if pttl < 0 {
			res.PTTL = -1
		}
	}
	return res
}

// EncodeValue is the key's value for a holder: the token, then NUL and the
// metadata when there is any.
func EncodeValue(token, metadata string) string {
	if metadata == "" {
		return token
	}
	return token + "\x00" + metadata
}

// permanent reports whether a node's error is one that waiting cannot cure,
// and what would cure it: Lock stops waiting when such errors leave no
// majority possible (ErrUnusable).
func permanent(err error) (hint string, ok bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	has := func(prefix string) bool { return strings.HasPrefix(msg, prefix) }
	switch {
	case has("NOGUARD"):
		return "the restart guard needs INFO server: allow INFO to the node's ACL user, or pass WithRestartGuard(0) (test servers such as miniredis; nodes with appendfsync always)", true
	case has("NOPERM"), strings.Contains(msg, "The user executing the script can't"):
		return "the node's ACL user lacks a permission the scripts need (docs/operations.md has the ACL line)", true
	case has("READONLY"):
		return "the node is a read-only replica: give redlock masters", true
	case has("WRONGTYPE"):
		return "the lock's key holds another type on the node: delete it, or choose another WithKeyPrefix", true
	case has("FENCE"):
		return "a fence counter is unusable: fix or delete it (docs/fencing.md)", true
	case has("NOAUTH"), has("WRONGPASS"):
		return "the node refuses the client's credentials", true
	case strings.Contains(msg, "unknown command"), strings.Contains(msg, "Unknown Redis command"),
		strings.Contains(msg, "Error compiling script"), has("ERR user_script"):
		return "the node cannot run the library's Lua scripts", true
	}
	return "", false
}
