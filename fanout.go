package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file sends a round to the nodes: the Client's fleet, one request,
// and the fan-out that hands it to every node at once (the replies are
// counted in quorum.go).

// fleet is a Client's nodes and how a round is sent to them: each call
// bounded by the node timeout, timed when an observer listens, and the
// calls still running when a round is decided counted in bg, which Close
// waits for.
type fleet struct {
	nodes   []node
	timeout time.Duration // WithNodeTimeout; 0: a TTL's share (nodeTimeout)
	timed   bool          // an observer listens: record each reply's latency
	bg      background
	rounds  sync.Pool // the everyday rounds, recycled (roundpool.go)
}

// quorum is the number of the fleet's nodes that make a majority.
func (f *fleet) quorum() int { return quorum(len(f.nodes)) }

// nodeTimeoutDivisor: unless WithNodeTimeout is given, a node call may take
// TTL/20.
const nodeTimeoutDivisor = 20

// nodeTimeout bounds each node call of a round about a lock with ttl.
func (f *fleet) nodeTimeout(ttl time.Duration) time.Duration {
	if f.timeout > 0 {
		return f.timeout
	}
	return ttl / nodeTimeoutDivisor
}

// send runs one round of req: on every node of the fleet unless req names
// nodes.
func (f *fleet) send(ctx context.Context, req request) *round {
	if req.nodes == nil {
		req.nodes = f.nodes
	}
	req.timed = f.timed
	return fanOut(ctx, req)
}

// sendDetached sends o to nodes, detached from ctx's cancellation and
// bounded by the node timeout of a lock with ttl; it returns once every
// node answered or timed out, and reports nothing (Close waits for the
// calls still running). It takes back or leaves what needs no answer: a
// failed attempt's grants, a queued Lock's place.
func (f *fleet) sendDetached(ctx context.Context, o *wire.Op, nodes []node, ttl time.Duration) {
	if len(nodes) == 0 {
		return
	}
	f.send(context.WithoutCancel(ctx), request{op: o, nodes: nodes, need: len(nodes), timeout: f.nodeTimeout(ttl)}).finish(&f.bg, nil)
}

// post is sendDetached that does not wait: o is queued on each node's
// stream before post returns, so it leaves ahead of anything this Client
// sends those nodes next, and its replies are counted in the background
// (Close waits for them). It takes a place out of queues: nothing waits
// on the answer, and a Lock call need not wait a round trip for it.
func (f *fleet) post(ctx context.Context, o *wire.Op, nodes []node, ttl time.Duration) {
	f.postThen(ctx, o, nodes, ttl, nil)
}

// postThen is post, with late called on each reply (j: its node's index
// in nodes) as it comes.
func (f *fleet) postThen(ctx context.Context, o *wire.Op, nodes []node, ttl time.Duration, late lateFunc) {
	if len(nodes) == 0 {
		return
	}
	req := request{op: o, nodes: nodes, need: len(nodes), timeout: f.nodeTimeout(ttl)}
	start := time.Now()
	r := newRound(req, start)
	r.closed = true       // nobody collects it: every reply is late,
	r.finish(&f.bg, late) // counted in bg until it comes
	req.start(context.WithoutCancel(ctx), r, start.Add(req.timeout))
}

// request is one round to send: an op, the nodes to send it to, and when
// the round is decided.
type request struct {
	op      *wire.Op
	nodes   []node
	need    int              // agreements that make the round a success
	timeout time.Duration    // bounds every node's call
	stop    func(tally) bool // decides the round before every node answered; nil waits for all
	// settled, if set, also decides the round early, from the replies so
	// far (by node index; those not in yet are zero).
	settled func(results []wire.Result) bool
	// judge, if set, sees each reply before it is counted, and may return
	// it marked as a grant that does not count (the restart guard does). It
	// takes and returns a value: a pointer through a function value would
	// move every reply to the heap.
	judge func(i int, r wire.Result) wire.Result
	timed bool // record each reply's latency, for observers
	// cut, if set, ends the wait for the round when it receives, leaving
	// the nodes still to answer undecided (their replies go to the late
	// handler): a set's look that a release notice made moot (see
	// waiter.cut).
	cut <-chan struct{}
	// detach sends the calls whatever becomes of ctx (each still ends at
	// the node timeout): the round returns when ctx ends, but its calls go
	// out. A release that returned at a majority must still
	// reach the other nodes when the caller cancels its context next.
	detach bool
	pool   *sync.Pool // the round comes from it, and is recycled (sendPooled)
	// pooledOp: op comes from the pool of ops (pooledOp); a pooled round
	// puts it back with itself.
	pooledOp bool
}

// detached reports whether req's calls are detached from the caller's
// context (see detach).
func (req request) detached() bool { return req.detach && !mutated(mutCallsAttached) }

// fanOut sends req.op to every node of req concurrently, each call bounded
// by req.timeout (and by ctx), and collects replies until req.stop reports
// the round decided, every node replied, the timeout passed or ctx is done.
// Nodes that have not replied by then are recorded as not answered, with
// the reason. The caller must pass the round to finish, which takes care
// of the calls still running.
//
// The round's deadline travels with each call as a time, not as a context
// of its own: a node drops a call whose deadline passed before it could be
// sent (see stream), and a derived context would cost the round 4 heap
// allocations.
func fanOut(ctx context.Context, req request) *round {
	start := time.Now()
	deadline := start.Add(req.timeout)
	r := newRound(req, start)
	req.start(ctx, r, deadline)
	r.collect(ctx, req.timeout, deadline)
	return r
}

// start starts req's call on each of its nodes, each answering to r and
// ending at deadline.
func (req *request) start(ctx context.Context, r *round, deadline time.Time) {
	for i, nd := range req.nodes {
		nd.Start(nodeio.Call{Ctx: ctx, Deadline: deadline, Op: req.op, Index: i, To: r, Detached: req.detached()})
	}
}

// fanOutAll runs the rounds of reqs (the same nodes, an op each) at once:
// each node is sent every op together, and every round is collected as
// fanOut does. So asking about many keys costs one batch per node (one
// pipeline, on a node that batches) and at most one node timeout, however
// many keys.
func fanOutAll(ctx context.Context, reqs []request) []*round {
	rounds, deadlines := startBatch(ctx, reqs)
	for j, r := range rounds {
		r.collect(ctx, reqs[j].timeout, deadlines[j])
	}
	return rounds
}

// startBatch starts the rounds of reqs (the same nodes, an op each): each
// node is sent every op together, in reqs' order (one pipeline, on a node
// that batches: it runs them in that order, or, where a far node's stream
// has lanes, runs each key's ops in that order). It returns the rounds,
// each to collect by its deadline.
func startBatch(ctx context.Context, reqs []request) ([]*round, []time.Time) {
	start := time.Now()
	rounds := make([]*round, len(reqs))
	deadlines := make([]time.Time, len(reqs))
	for j := range reqs {
		rounds[j] = newRound(reqs[j], start)
		deadlines[j] = start.Add(reqs[j].timeout)
	}
	if len(reqs) == 0 {
		return rounds, deadlines
	}
	calls := make([]nodeio.Call, len(reqs))
	for i, nd := range reqs[0].nodes {
		for j := range reqs {
			calls[j] = nodeio.Call{Ctx: ctx, Deadline: deadlines[j], Op: reqs[j].op, Index: i, To: rounds[j], Detached: reqs[j].detached()}
		}
		startAll(nd, calls)
	}
	return rounds, deadlines
}

// batcher is a node that can send calls together: one batch, in order.
type batcher interface {
	StartAll(calls []nodeio.Call)
}

// startAll starts calls on nd, together if it can.
func startAll(nd node, calls []nodeio.Call) {
	if b, ok := nd.(batcher); ok {
		b.StartAll(calls)
		return
	}
	for _, c := range calls {
		nd.Start(c)
	}
}

// newRound encodes req's op and makes its round.
func newRound(req request, start time.Time) *round {
	n := len(req.nodes)
	req.op.Encode()
	r := takeRound(req, n)
	r.tally, r.pending = tally{n: n, need: req.need}, int32(n)
	r.judge, r.stop, r.settled, r.cut, r.start = req.judge, req.stop, req.settled, req.cut, start
	if n <= len(r.buf) {
		r.results = r.buf[:n]
	} else {
		r.results = make([]wire.Result, n)
	}
	if req.timed {
		r.latency = make([]time.Duration, n)
	}
	return r
}
