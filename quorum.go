package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is the counting: what a majority is, the tally of a round,
// and the round itself, which records each node's reply as it comes and
// decides. How a round is sent to the nodes is in fanout.go.

// quorum is the number of nodes that make a majority of n.
func quorum(n int) int { return n/2 + 1 }

// tally counts the outcomes of one round so far.
type tally struct {
	n       int // nodes in the round
	need    int // agreements that make the round a success
	ok      int // granted, extended or released
	against int // refused, absent or failed
}

// won reports whether enough nodes agreed.
func (t tally) won() bool { return t.ok >= t.need }

// lost reports whether enough nodes can no longer agree.
func (t tally) lost() bool { return t.against > t.n-t.need }

// decided reports whether the outcome is known: a majority agreed, or can no
// longer agree.
func (t tally) decided() bool { return t.won() || t.lost() }

// round is one request sent to every node at once (see fanOut). Each node
// hands its result to Deliver, which records it and never blocks, so a
// node that never answers cannot block anyone. The caller sleeps until the
// round is decided and is woken once, by the reply that decides it, or at
// the round's deadline whether or not the client honours context deadlines
// (go-redis ignores them on reads unless ContextTimeoutEnabled is set), or
// when its context ends. Replies that come after that go to the round's
// late handler (see finish). The everyday path's rounds are pooled, and
// reused once nothing holds them (roundpool.go).
type round struct {
	results []wire.Result   // by node index: in buf when it fits
	buf     [5]wire.Result  // the results of a round over up to 5 nodes, in the round's own allocation
	latency []time.Duration // by node index, when timed: from the start of the round to the reply
	tally   tally
	pending int32 // calls still running: when fanOut returned, those late
	// refs counts a pooled round's holders (roundpool.go): its caller until
	// it recycles the round, each call until it delivered, the deadline
	// timer while armed.
	refs atomic.Int32

	judge   func(i int, r wire.Result) wire.Result // see request
	stop    func(tally) bool                       // see request
	settled func(results []wire.Result) bool       // see request
	cut     <-chan struct{}                        // see request
	start   time.Time                              // when the round was sent

	mu       sync.Mutex    // guards what follows, and the above until closed
	wake     chan struct{} // one wake-up for the caller: decided, or out of time
	woken    bool          // the wake-up was sent
	closed   bool          // fanOut returned: replies from now on are late
	finished bool          // finish was called: late replies go to late
	wasCut   bool          // collect returned undecided, on req.cut
	answered uint8         // a pooled round's nodes that delivered, by index: a second delivery is dropped
	late     lateFunc
	bg       *background
	held     *[]reply // late replies that came before finish (a pointer: the round stays in its size class)

	pool  *sync.Pool  // where the round goes back once nothing holds it; nil: not pooled
	timer *time.Timer // a pooled round's deadline timer, kept for its next use
	op    *wire.Op    // a pooled round's pooled op, which goes back with it
}

// reply is one node's result, tagged with the node's index.
type reply struct {
	i int
	r wire.Result
}

// lateFunc handles the reply of node i that came after its round was
// decided. It runs on the goroutine that delivered the reply (a node's
// stream writer) and must not block: work that sends, and so waits for
// replies, goes in the function it returns (nil: none), which runs on a
// goroutine of its own that Close waits for.
type lateFunc func(i int, res wire.Result) (then func())

// Deliver is how node i hands over its result, exactly once, from whatever
// goroutine it answers on (a pooled round drops a second). It never
// blocks (a late handler does not).
func (r *round) Deliver(i int, res wire.Result) {
	res.Answered = true
	if res.Status == wire.StatusFailed && res.Err == nil {
		res.Err = errNoResult
	}
	if r.judge != nil {
		res = r.judge(i, res)
	}
	r.mu.Lock()
	if !r.deliverOnce(i) {
		r.mu.Unlock()
		return
	}
	switch {
	case !r.closed:
		r.record(i, res)
		wake := !r.woken && r.decided()
		r.woken = r.woken || wake
		r.mu.Unlock()
		if wake {
			r.wake <- struct{}{} // buffered, sent once
		}
	case !r.finished:
		if r.held == nil {
			r.held = new([]reply)
		}
		*r.held = append(*r.held, reply{i, res})
		r.mu.Unlock()
	default:
		late, bg := r.late, r.bg
		r.mu.Unlock()
		handleLate(late, bg, i, res)
	}
	r.unref() // the call is done with the round
}

// decided reports whether the replies so far decide the round: every node
// answered, or req.stop or req.settled says so. Callers hold r.mu.
func (r *round) decided() bool {
	return r.pending == 0 || r.stop != nil && r.stop(r.tally) || r.settled != nil && r.settled(r.results)
}

// collect waits until the replies decide the round, the deadline passes
// or ctx is done; the nodes that have not answered by then are recorded as
// not answered, with the reason.
func (r *round) collect(ctx context.Context, timeout time.Duration, deadline time.Time) {
	r.mu.Lock()
	wait := !r.woken && !r.decided() // replies already in need no timer
	r.mu.Unlock()
	cut := false
	if wait {
		t := r.arm(time.Until(deadline))
		if done := ctx.Done(); done == nil && r.cut == nil {
			<-r.wake
		} else {
			select { // a nil channel (no context's end, no cut) never receives
			case <-r.wake:
			case <-done:
			case <-r.cut:
				cut = true
			}
		}
		r.disarm(t)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	switch {
	case r.decided():
	case cut:
		r.wasCut = true // the nodes still to answer stay undecided, not failed
	default:
		r.timeOut(ctx, timeout)
	}
}

// cutShort reports whether the round was left undecided on its request's
// cut (see request).
func (r *round) cutShort() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wasCut
}

// outOfTime wakes the caller at the round's deadline.
func (r *round) outOfTime() {
	r.mu.Lock()
	wake := !r.woken && !r.closed
	r.woken = r.woken || wake
	r.mu.Unlock()
	if wake {
		r.wake <- struct{}{}
	}
	r.unref() // the timer is done with the round
}

// record counts one reply that came in time. Callers hold r.mu.
func (r *round) record(i int, res wire.Result) {
	r.pending--
	r.results[i] = res
	if r.latency != nil {
		r.latency[i] = time.Since(r.start)
	}
	if res.OK() {
		r.tally.ok++
	} else {
		r.tally.against++
	}
}

// timeOut records the nodes that have not answered when the round's
// context ended: the caller's own cancellation or deadline is reported as
// such; otherwise the node missed the round's deadline. Callers hold r.mu.
func (r *round) timeOut(ctx context.Context, timeout time.Duration) {
	err := ctx.Err()
	if err == nil {
		err = fmt.Errorf("no reply within %v: %w", timeout, context.DeadlineExceeded)
	}
	for i := range r.results {
		if !r.results[i].Answered {
			r.results[i] = wire.Result{Err: err}
			r.tally.against++
		}
	}
}

// finish hands the replies of calls still running to late (which may be
// nil), as they come, and counts them in bg until then, so that Close
// waits for them.
func (r *round) finish(bg *background, late lateFunc) {
	r.mu.Lock()
	if r.pending == 0 {
		r.mu.Unlock()
		return
	}
	r.finished, r.late, r.bg = true, late, bg
	var held []reply
	if r.held != nil {
		held = *r.held
	}
	r.held = nil
	bg.Add(int(r.pending))
	r.mu.Unlock()
	for _, x := range held {
		handleLate(late, bg, x.i, x.r)
	}
}

// handleLate runs late on one late reply, and what late returns on a
// goroutine of its own, and counts the reply done.
func handleLate(late lateFunc, bg *background, i int, res wire.Result) {
	if late != nil {
		if then := late(i, res); then != nil {
			bg.Go(then)
		}
	}
	bg.Done()
}

// Reasons a node did not agree that callers match only through the text.
var (
	// errUndecided: the node had not answered when the round was decided;
	// its reply is handled when it comes.
	errUndecided = errors.New("no reply yet when the outcome was decided")
	// errNoResult: a node implementation returned neither a status nor an
	// error (a bug; kept from counting as an answer).
	errNoResult = errors.New("node call returned no result")
)

// background counts what a Client still has running after the calls that
// started it returned (the late replies its rounds await, the goroutines
// that act on them, the nodes' stream writers), so that Close can wait for
// them. Unlike a sync.WaitGroup, it may grow from zero while Close waits: a
// Lock in flight when Close is called counts its round's late replies then
// (a late grant is taken back), and Close waits for those too. (With a WaitGroup that
// Add raced with Close's Wait: the simulator's Close mid-run found it,
// under -race.) The count is atomic, as every round adds to it and every
// late reply takes from it; mu is for the waiters.
type background struct {
	n       atomic.Int64
	waiting atomic.Bool // Wait is waiting on idle
	mu      sync.Mutex
	idle    chan struct{} // closed when n drops to zero, if Wait is waiting
}

// Add adds delta to the count.
func (b *background) Add(delta int) {
	n := b.n.Add(int64(delta))
	if n < 0 {
		panic("redlock: background count below zero")
	}
	if n == 0 && b.waiting.Load() {
		b.mu.Lock()
		b.wake()
		b.mu.Unlock()
	}
}

// wake closes idle if the count is zero; callers hold b.mu.
func (b *background) wake() {
	if b.idle != nil && b.n.Load() == 0 {
		close(b.idle)
		b.idle = nil
		b.waiting.Store(false)
	}
}

// Done subtracts one from the count.
func (b *background) Done() { b.Add(-1) }

// Go runs f on a goroutine of its own, counted.
func (b *background) Go(f func()) {
	b.Add(1)
	go func() {
		defer b.Done()
		f()
	}()
}

// Wait waits until the count is zero.
func (b *background) Wait() {
	b.mu.Lock()
	if b.n.Load() == 0 {
		b.mu.Unlock()
		return
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.waiting.Store(true)
	b.wake() // an Add that reached zero before waiting was set woke nobody
	b.mu.Unlock()
	<-idle
}
