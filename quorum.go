package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

var errNoResult = errors.New("node call returned no result")

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

// reply is one node's result, tagged with the node's index.
type reply struct {
	i int
	r result
}

// workerIdle is how long an idle worker waits for another call.
const workerIdle = time.Second

// workers runs node calls on goroutines kept for reuse. A fresh goroutine
// starts with a small stack and grows it, by copying, through go-redis's deep
// call chain on every call: runtime.copystack was 9% of the client's CPU in
// the throughput benchmark (bench/, 32 goroutines on 5 nodes). Idle workers
// exit after workerIdle, and after their call once done is closed.
type workers struct {
	jobs    chan func()     // unbuffered: a send succeeds only when a worker is idle
	done    <-chan struct{} // the Client's closed channel; nil never closes
	started atomic.Int64    // goroutines started, for tests
}

func newWorkers(done <-chan struct{}) *workers {
	return &workers{jobs: make(chan func()), done: done}
}

// run calls f on an idle worker, or on a new one.
func (w *workers) run(f func()) {
	select {
	case w.jobs <- f:
	default:
		w.started.Add(1)
		go w.work(f)
	}
}

func (w *workers) work(f func()) {
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case <-w.done:
			return
		default:
		}
		select {
		case f = <-w.jobs:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		case <-w.done:
			return
		}
	}
}

// round is one operation sent to every node at once. Each node call runs in
// its own goroutine and reports on a buffered channel, so a node that never
// answers cannot block anyone; fanOut stops waiting for it at the round's
// deadline whether or not the client honours context deadlines (go-redis
// ignores them on reads unless ContextTimeoutEnabled is set).
type round struct {
	results []result        // by node index
	latency []time.Duration // by node index, when timed: from the start of the round to the reply
	tally   tally
	pending int // calls still running when fanOut returned
	replies chan reply
	cancel  context.CancelFunc
}

// fanOut sends o to every node concurrently, each call bounded by
// timeout (and by ctx), and collects replies until stop reports the round
// decided (need agreements make a success), every node replied, the timeout passed or ctx is done. Nodes that
// have not replied by then are recorded as failed with the reason. The caller
// must pass the round to finish, which takes care of the calls still running.
// With timed, each reply's latency is recorded, for observers.
func fanOut(ctx context.Context, w *workers, nodes []node, need int, timeout time.Duration, o *op, stop func(tally) bool, timed bool) *round {
	n := len(nodes)
	var start time.Time
	if timed {
		start = time.Now()
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	r := &round{
		results: make([]result, n),
		tally:   tally{n: n, need: need},
		pending: n,
		replies: make(chan reply, n),
		cancel:  cancel,
	}
	if timed {
		r.latency = make([]time.Duration, n)
	}
	for i := range n {
		w.run(func() {
			res := nodes[i].do(rctx, o)
			res.answered = true
			if res.status == statusFailed && res.err == nil {
				res.err = errNoResult
			}
			if o.guard != nil { // acquire ops go to every node: i is the node's index
				o.guard.check(i, &res)
			}
			r.replies <- reply{i, res}
		})
	}
	for r.pending > 0 && (stop == nil || !stop(r.tally)) {
		select {
		case x := <-r.replies:
			r.pending--
			r.results[x.i] = x.r
			if timed {
				r.latency[x.i] = time.Since(start)
			}
			if x.r.ok() {
				r.tally.ok++
			} else {
				r.tally.against++
			}
		case <-rctx.Done():
			// The caller's own cancellation or deadline is reported as
			// such; otherwise the node missed the round's deadline.
			err := ctx.Err()
			if err == nil {
				err = fmt.Errorf("no reply within %v: %w", timeout, context.DeadlineExceeded)
			}
			for i := range r.results {
				if !r.results[i].answered {
					r.results[i] = result{err: err}
					r.tally.against++
				}
			}
			return r
		}
	}
	return r
}

// finish hands the replies of calls still running to late, in a goroutine
// tracked by wg, and releases the round's resources once every call has
// returned. late may be nil.
func (r *round) finish(wg *sync.WaitGroup, late func(i int, res result)) {
	if r.pending == 0 {
		r.cancel()
		return
	}
	wg.Go(func() {
		defer r.cancel()
		for range r.pending {
			x := <-r.replies
			if late != nil {
				late(x.i, x.r)
			}
		}
	})
}
