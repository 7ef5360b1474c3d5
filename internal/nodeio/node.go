package nodeio

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file is one node behind go-redis: standalone, Sentinel or Cluster
// (the scripts, and the arguments sent to them, are in internal/wire; how
// commands leave, batched, is in stream.go). A script goes as EVAL (which
// also caches it) until the node is known to hold it, then as EVALSHA, and
// again as EVAL when the node answers NOSCRIPT, e.g. after SCRIPT FLUSH
// (stream.held).
// (go-redis's Script.Run does the same, but cannot turn off go-redis's own
// retries; see noRetry.)

// noRetry marks a command go-redis must not re-send by itself. A re-sent
// script whose first run took effect would misreport: a created key as
// "ours already", a release as "already expired". Redlock retries whole
// attempts instead, and a node that fails just counts as failed.
type noRetry struct{ *redis.Cmd }

func (noRetry) NoRetry() bool { return true }

// Node is a node behind a go-redis client: standalone, Sentinel
// failover or Cluster.
type Node struct {
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
	spawn   func(func()) // the Client's: runs a goroutine Close waits for
}

func New(client redis.UniversalClient, addr string, index int) *Node {
	n := &Node{client: client, addr: addr, index: index}
	if cc, ok := client.(*redis.ClusterClient); ok {
		n.cluster, n.shards = cc, map[string]*stream{}
		return n
	}
	n.stream = newStream(client, index)
	return n
}

// Bind ties the node's streams to its Client (see stream.Bind). Shards are
// not guarded: a Cluster has no one run_id.
func (n *Node) Bind(done <-chan struct{}, spawn func(func()), guard bool) {
	if n.cluster == nil {
		n.stream.bind(done, spawn, guard)
		return
	}
	n.done, n.spawn = done, spawn
}

func (n *Node) Name() string { return n.addr }

// Cluster reports whether the node is a Redis Cluster: a script's keys
// must then share one hash slot.
func (n *Node) Cluster() bool { return n.cluster != nil }

func (n *Node) Start(c Call) {
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
		n.spawn(func() { n.route(ctx, c) })
	default:
		// With the slot map loaded, MasterForKey makes no call: ctx is
		// unused (reloads run in the background).
		n.route(c.Ctx, c)
	}
}

// StartAll sends calls together: in one batch of a standalone or Sentinel
// node's stream; a Cluster node routes each by its key.
func (n *Node) StartAll(calls []Call) {
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
func (n *Node) route(ctx context.Context, c Call) {
	master, err := n.cluster.MasterForKey(ctx, c.Op.Key)
	if err != nil {
		c.To.Deliver(c.Index, wire.Result{Err: err})
		return
	}
	n.routed.Store(true) // the ClusterClient keeps a slot map from now on
	n.shard(master).enqueue(c)
}

// shard returns the stream of one of a Cluster's masters.
func (n *Node) shard(master *redis.Client) *stream {
	addr := master.Options().Addr
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.shards[addr]
	if !ok {
		s = newStream(master, n.index)
		s.bind(n.done, n.spawn, false)
		s.redirect = n.cluster
		n.shards[addr] = s
	}
	return s
}

// Watch runs one subscription on the node. go-redis reconnects it
// by itself after a failure; notices published meanwhile are lost, which the
// waiters' timers cover. ready is called at each confirmation: the first,
// and each after a reconnect (which a restart of the server causes), before
// any notice that came on the new connection.
func (n *Node) Watch(channel string, deliver func(channel, payload string), ready func()) (stop func()) {
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
		for m := range sub.ChannelWithSubscriptions() {
			switch m := m.(type) {
			case *redis.Message:
				deliver(m.Channel, m.Payload)
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					ready()
				}
			}
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
