package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/memnode"
	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
)

// fakeNode is a node for tests: an in-memory Redis (internal/memnode) that
// runs the production scripts, sent with the production encoding, plus
// fault injection. Its clock is time.Now: run a test inside synctest.Test
// and keys expire in virtual time with the library's timers.
// TestConformance holds memnode to redis-server's replies.
type fakeNode struct {
	id    string
	index int
	mem   *memnode.Node

	mu          sync.Mutex
	err         error         // every call fails with it
	gate        chan struct{} // calls wait for it to close, ignoring ctx like go-redis without ContextTimeoutEnabled
	delay       time.Duration // every call takes this long, ignoring ctx: a slow node
	acqGate     chan struct{} // acquires (only) wait for it to close
	amnesia     bool          // forgets lock keys at once: grants to everyone (timing assumptions broken)
	noNotices   bool          // the node's notices reach nobody
	noticeGate  chan struct{} // if set, its notices wait for it to close: read after the calls that follow
	restarting  bool          // restartMem under way: notices are lost
	readies     []func()      // its subscriptions' confirmations, which a restart repeats (see restartMem)
	releaseErrs []error       // ctx.Err() seen by each release call
	// variant, if set, may name another script source for an op: a mutant
	// (see lenientWriteBack and sim_mutants_test.go); "" runs the op's own.
	variant func(o *wire.Op) string
	// plainOverwrites, a mutant, sends a plain acquire without NX: it
	// takes the key whoever holds it.
	plainOverwrites bool
	// zaddLowers, a mutant, sends a plain fenced acquire's ZADD without
	// GT: the counter is set to the proposal, lower or not.
	zaddLowers bool
	// hold, if set, is called before every op, and may block it: a test
	// builds its schedule with it. Set it before the node is used.
	hold func(o *wire.Op)
	// ran, if set, is called after every op the node ran (not one it
	// dropped or failed). Set it before the node is used.
	ran func(o *wire.Op)
	// batched, if set, is called with the ops of every batch of two or
	// more (StartAll). Set it before the node is used.
	batched func(ops []*wire.Op)

	calls   atomic.Int32
	extends atomic.Int32
}

var _ node = (*fakeNode)(nil)

func newFakeNodes(n int) []*fakeNode {
	nodes := make([]*fakeNode, n)
	for i := range nodes {
		nodes[i] = &fakeNode{id: fmt.Sprintf("fake%d", i), index: i, mem: memnode.New()}
	}
	return nodes
}

func (n *fakeNode) Name() string { return n.id }

// start runs the call on a goroutine of its own: the fake's calls block
// (gates, delays) the way a node's replies can be slow to come.
// fakeYield, with -fakeyield, has each fake node's call yield the
// processor a random number of times (up to 3,000) before it runs: the
// schedules of a loaded machine, where a round's last node answers after
// the call that waited for a majority has returned. A test that reads the
// nodes right after such a call without synctest.Wait fails under it; one
// did only beside a CPU hog, once in some thousand runs, before the flag.
// Virtual time does not move while a call is runnable, so timings hold.
var fakeYield = flag.Bool("fakeyield", false, "fake nodes yield a random number of times before each call (slow: about 15x)")

func (n *fakeNode) Start(c nodeio.Call) { n.startPaused(c, 0, turn{}) }

// StartAll runs a batch's calls in order, each once the one before has
// run, as a node's stream sends a batch in one pipeline. (A type that
// embeds a fakeNode and has a Start of its own needs a StartAll too.)
func (n *fakeNode) StartAll(calls []nodeio.Call) {
	if n.batched != nil && len(calls) > 1 {
		ops := make([]*wire.Op, len(calls))
		for i, c := range calls {
			ops[i] = c.Op
		}
		n.batched(ops)
	}
	var before <-chan struct{}
	for _, c := range calls {
		t := turn{after: before, done: make(chan struct{})}
		before = t.done
		n.startPaused(c, 0, t)
	}
}

// turn keeps a connection's calls in order: a call runs on the node only
// after the call before it (after closed), and closes done once it has.
// lag is how long a call, once sent, travels before the node reads it (a
// link losing packets): it runs then, even if its caller gave up
// meanwhile, as a real node runs what reached its socket. The zero turn
// orders nothing.
type turn struct {
	after <-chan struct{}
	done  chan struct{}
	lag   time.Duration
	run   func() // if set, called as the call runs on the node
}

// startPaused runs the call as start does, in its turn, and holds its
// reply back for pause: a client paused between sending and reading (the
// node ran the call on time).
func (n *fakeNode) startPaused(c nodeio.Call, pause time.Duration, t turn) {
	go func() {
		base := c.Ctx
		if c.Detached { // as the stream: sent whatever becomes of c.ctx (fakes read no values)
			base = context.Background()
		}
		ctx, cancel := context.WithDeadline(base, c.Deadline)
		defer cancel()
		if *fakeYield {
			for range rand.IntN(3000) {
				runtime.Gosched()
			}
		}
		res := n.do(ctx, &c, t)
		time.Sleep(pause)
		c.To.Deliver(c.Index, res)
	}()
}

// do runs op o on the node, as a stream would: its arguments as encoded
// (EVALSHA, then EVAL on NOSCRIPT), its reply decoded, an acquire's
// result carrying the node's run_id.
func (n *fakeNode) do(ctx context.Context, c *nodeio.Call, t turn) wire.Result {
	if t.done != nil {
		defer close(t.done)
	}
	o := c.Op
	if n.hold != nil {
		n.hold(o)
	}
	switch {
	case wire.IsAcquire(o.Kind):
		n.mu.Lock()
		gate := n.acqGate
		n.mu.Unlock()
		if gate != nil {
			<-gate
		}
	case o.Kind == wire.OpRelease:
		n.mu.Lock()
		n.releaseErrs = append(n.releaseErrs, ctx.Err())
		n.mu.Unlock()
	case o.Kind == wire.OpExtend:
		n.extends.Add(1)
	}
	if err := n.enter(); err != nil {
		return wire.Result{Err: err}
	}
	if t.after != nil {
		<-t.after
	}
	// The node's delay stands for the calls ahead of this one on the
	// connection: a call that ended meanwhile (its context, unless
	// detached, or its deadline) is dropped, not sent, as the stream drops it.
	if c.Ended() {
		return wire.Result{Err: c.NotSent()}
	}
	time.Sleep(t.lag) // sent: it runs, whatever becomes of its caller
	if t.run != nil {
		t.run()
	}
	n.mu.Lock()
	amnesia, variant, overwrites, lowers := n.amnesia, n.variant, n.plainOverwrites, n.zaddLowers
	n.mu.Unlock()
	if amnesia && wire.IsAcquire(o.Kind) {
		n.mem.Do(append([]any{"DEL"}, lockKeys(o)...)...)
	}
	args := o.Args(n.index)
	if variant != nil {
		if src := variant(o); src != "" {
			args = slicesWith(o.EvalArgs(n.index), 1, src)
		}
	}
	if overwrites && wire.IsPlain(o.Kind) {
		args = slices.DeleteFunc(slices.Clone(args), func(a any) bool { return a == "nx" })
	}
	r := n.mem.Do(args...)
	if e, ok := r.(memnode.Error); ok && wire.IsNoScript(e) {
		r = n.mem.Do(o.EvalArgs(n.index)...)
	}
	var res wire.Result
	if pair := o.Pair(); pair != nil { // as internal/nodeio's lane sends it
		if lowers {
			pair = slices.DeleteFunc(slices.Clone(pair), func(a any) bool { return a == "gt" })
		}
		again := false
		if res, again = wire.PlainFenced(o, memCmd(ctx, r), memCmd(ctx, n.mem.Do(pair...))); again {
			o = o.Regrant()
			res = o.Decode(memCmd(ctx, n.mem.Do(o.EvalArgs(n.index)...)))
		}
	} else {
		res = o.Decode(memCmd(ctx, r))
	}
	if n.ran != nil {
		n.ran(o)
	}
	if wire.TellsRunID(o) {
		res.RunID = n.mem.RunID()
	}
	return res
}

// memCmd is a memnode reply as go-redis's command would hold it.
func memCmd(ctx context.Context, r any) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	switch r := r.(type) {
	case memnode.Error:
		cmd.SetErr(r)
	case nil:
		cmd.SetErr(redis.Nil)
	default:
		cmd.SetVal(r)
	}
	return cmd
}

// lockKeys returns the op's lock keys, for amnesia.
func lockKeys(o *wire.Op) []any {
	if o.Keys == nil {
		return []any{o.Key}
	}
	ks := make([]any, len(o.Keys))
	for i, k := range o.Keys {
		ks[i] = k
	}
	return ks
}

func slicesWith(s []any, i int, v any) []any {
	s[i] = v
	return s
}

// enter counts the call, waits for the gate and the node's delay, and
// returns the injected error, if any.
func (n *fakeNode) enter() error {
	n.calls.Add(1)
	n.mu.Lock()
	gate, err, delay := n.gate, n.err, n.delay
	n.mu.Unlock()
	if gate != nil {
		<-gate
	}
	time.Sleep(delay)
	return err
}

func (n *fakeNode) setGate(g chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gate = g
}

func (n *fakeNode) setErr(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.err = err
}

// Watch subscribes to the node's channel; it is confirmed at once.
func (n *fakeNode) Watch(channel string, deliver func(channel, payload string), ready func()) (stop func()) {
	n.mu.Lock()
	n.readies = append(n.readies, ready)
	n.mu.Unlock()
	stop = n.mem.Subscribe(channel, func(ch, payload string) {
		n.mu.Lock()
		quiet, gate := n.noNotices || n.restarting, n.noticeGate
		n.mu.Unlock()
		if gate != nil {
			<-gate
		}
		if !quiet {
			deliver(ch, payload)
		}
	})
	ready()
	return stop
}

// restart makes the node a new process that kept nothing: a new run_id and
// no keys, as a restart without persistence.
func (n *fakeNode) restart() { n.restartMem(false) }

// restartMem restarts the node, with its keys kept or not. A restart
// closes every connection: each subscription is confirmed again (as the
// Clients' reconnect) by the new process, before any notice of it; what
// it publishes before then is lost, as it is to a client reconnecting.
func (n *fakeNode) restartMem(keep bool) {
	n.mu.Lock()
	readies := slices.Clone(n.readies)
	n.restarting = true
	n.mu.Unlock()
	n.mem.Restart(keep)
	for _, ready := range readies {
		ready()
	}
	n.mu.Lock()
	n.restarting = false
	n.mu.Unlock()
}

var errFakeDown = errors.New("fake: connection refused")

// newTestClient builds a Client over fake nodes, and closes it when the test
// ends.
func newTestClient(t testing.TB, fakes []*fakeNode, opts ...Option) *Client {
	t.Helper()
	nodes := make([]node, len(fakes))
	for i, f := range fakes {
		nodes[i] = f
	}
	// A generous node timeout: fakes answer at once, but a loaded 2-core
	// machine can delay any goroutine by milliseconds. Tests about node
	// timeouts pass their own, which comes later and wins.
	c, err := newClient(nodes, append([]Option{WithAnyNodeCount(), WithNodeTimeout(5 * time.Second)}, opts...))
	if err != nil {
		t.Fatalf("newClient: %v", err)
	}
	t.Cleanup(func() {
		// Tests that break nodes leave locks whose release fails; Close's
		// own behaviour is tested in TestClose.
		_ = c.Close(context.Background())
	})
	return c
}
