package redlock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// noRetry marks a command go-redis must not re-send by itself. A re-sent
// script whose first run took effect would misreport: a created key as
// "ours already", a release as "already expired". Redlock retries whole
// attempts instead, and a node that fails just counts as failed.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// reason is why the node did not agree, for a NodeResult; nil if it did.
func reason(r wire.Result) error {
	switch {
	case r.OK():
		return nil
	case r.Guarded:
		return ErrNodeRestarted
	case r.Status == wire.StatusHeld:
		return ErrHeld
	case r.Status == wire.StatusQueued:
		return ErrQueued
	case r.Status == wire.StatusAbsent:
		return ErrNoKey
	case r.Undecided():
		return errUndecided
	}
	return r.Err
}

// node is everything the library asks of one Redis master.
type node interface {
	// Start sends c.o to the node and returns at once; the node hands its
	// result to c.To.Deliver(c.i, ·) exactly once: when it answered, when
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
		c.To.Deliver(c.Index, wire.Result{Err: err})
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
