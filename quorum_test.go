package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"
)

func TestQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		assert.Equal(t, want, quorum(n), "quorum(%d)", n)
	}
	for _, tc := range []struct {
		t                 tally
		won, lost, decide bool
	}{
		{tally{n: 5, need: 3}, false, false, false},
		{tally{n: 5, need: 3, ok: 3}, true, false, true},
		{tally{n: 5, need: 3, ok: 2, against: 2}, false, false, false},
		{tally{n: 5, need: 3, ok: 2, against: 3}, false, true, true},
		{tally{n: 3, need: 2, against: 2}, false, true, true},
	} {
		assert.Equal(t, tc.won, tc.t.won(), "%+v won", tc.t)
		assert.Equal(t, tc.lost, tc.t.lost(), "%+v lost", tc.t)
		assert.Equal(t, tc.decide, tc.t.decided(), "%+v decided", tc.t)
	}
}

// TestQuorumMasks runs every combination of granting, refusing and failing
// nodes for N = 3, 5 and 7: the lock is obtained exactly when a majority
// granted, a failed attempt leaves none of its keys behind, and a foreign
// holder's key is never touched.
func TestQuorumMasks(t *testing.T) {
	for _, n := range []int{3, 5, 7} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			combos := int(math.Pow(3, float64(n)))
			for mask := range combos {
				fakes := newFakeNodes(n)
				kinds := make([]int, n) // 0 grants, 1 refuses (held by another token), 2 fails
				grants := 0
				for i, m := 0, mask; i < n; i, m = i+1, m/3 {
					kinds[i] = m % 3
					switch kinds[i] {
					case 0:
						grants++
					case 1:
						fakes[i].set("redlock:{k}", "other", time.Minute)
					case 2:
						fakes[i].setErr(errFakeDown)
					}
				}
				c := newTestClient(t, fakes)
				l, err := c.TryLock(t.Context(), "k")
				if want := grants >= n/2+1; (err == nil) != want {
					t.Fatalf("kinds %v: got err %v, want success %v", kinds, err, want)
				}
				if err != nil {
					var qe *QuorumError
					if !errors.As(err, &qe) || !errors.Is(err, ErrNotObtained) {
						t.Fatalf("kinds %v: got %v, want a QuorumError matching ErrNotObtained", kinds, err)
					}
					// Fail-fast may decide before every grant arrived.
					if qe.Granted > grants || qe.Quorum != n/2+1 || len(qe.Nodes)+qe.Granted != n {
						t.Fatalf("kinds %v: got granted %d quorum %d nodes %d", kinds, qe.Granted, qe.Quorum, len(qe.Nodes))
					}
				} else if err := l.Unlock(t.Context()); err != nil {
					t.Fatalf("kinds %v: Unlock: %v", kinds, err)
				}
				c.bg.Wait()
				for i, f := range fakes {
					v, held := f.value("redlock:{k}")
					if kinds[i] == 1 && v != "other" {
						t.Fatalf("kinds %v: node %d: foreign holder's key is %q, want it untouched", kinds, i, v)
					}
					if kinds[i] == 0 && held {
						t.Fatalf("kinds %v: node %d still holds %q after the attempt ended", kinds, i, v)
					}
				}
			}
		})
	}
}

// TestReturnsOnMajority: Lock does not wait for nodes that have not answered
// once a majority granted, even if they never honour the context: in virtual
// time it returns at the very instant it started.
func TestReturnsOnMajority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		gate := make(chan struct{})
		fakes[1].setGate(gate)
		fakes[3].setGate(gate)
		c := newTestClient(t, fakes, WithNodeTimeout(time.Hour))
		start := time.Now()
		l, err := c.TryLock(context.Background(), "k")
		require.NoError(t, err)
		require.Zero(t, time.Since(start), "TryLock waited for the nodes that had not answered")
		close(gate)
		c.bg.Wait() // the two late grants belong to our lock
		for i, f := range fakes {
			v, _ := f.value("redlock:{k}")
			require.Equal(t, l.Token(), v, "node %d", i)
		}
		require.NoError(t, l.Unlock(t.Context()))
		c.bg.Wait()
		for i, f := range fakes {
			_, held := f.value("redlock:{k}")
			require.False(t, held, "node %d still holds the key after Unlock", i)
		}
	})
}

// TestFailsFast: once a majority is impossible the attempt ends without
// waiting for the rest.
func TestFailsFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		gate := make(chan struct{})
		defer close(gate)
		fakes[0].setGate(gate)
		fakes[1].setGate(gate)
		for _, f := range fakes[2:] {
			f.setErr(errFakeDown)
		}
		c := newTestClient(t, fakes, WithNodeTimeout(time.Hour))
		start := time.Now()
		_, err := c.TryLock(context.Background(), "k")
		require.Zero(t, time.Since(start), "TryLock waited although a majority was impossible")
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		require.Len(t, qe.Nodes, 5)
		for _, ne := range qe.Nodes[:2] {
			assert.ErrorIs(t, ne.Err, errUndecided, "node %s", ne.Node)
		}
		for _, ne := range qe.Nodes[2:] {
			assert.ErrorIs(t, ne.Err, errFakeDown, "node %s: want its own error", ne.Node)
		}
	})
}

// TestNodeTimeout: a node that ignores its context is cut off at exactly
// the node timeout; its timeout is not the caller's, and its late grant is
// released.
func TestNodeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		gate := make(chan struct{})
		fakes[2].setGate(gate)
		fakes[1].set("redlock:{k}", "other", time.Minute)
		c := newTestClient(t, fakes, WithNodeTimeout(20*time.Millisecond))
		start := time.Now()
		_, err := c.TryLock(t.Context(), "k")
		require.Equal(t, 20*time.Millisecond, time.Since(start))
		require.ErrorIs(t, err, ErrNotObtained)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "one node's timeout must not look like the caller's deadline")
		var qe *QuorumError
		require.ErrorAs(t, err, &qe)
		last := qe.Nodes[len(qe.Nodes)-1]
		require.Equal(t, "fake2", last.Node)
		require.ErrorIs(t, last.Err, context.DeadlineExceeded)
		_, held := fakes[0].value("redlock:{k}")
		require.False(t, held, "node 0 still holds the failed attempt's key")
		close(gate) // the hung node now grants, after the attempt ended
		c.bg.Wait()
		v, held := fakes[2].value("redlock:{k}")
		require.False(t, held, "late grant left %q behind", v)
	})
}

// errgroupFanOut is the plain design the project card names: one goroutine
// per node under errgroup, each call bounded by the node timeout, and the
// outcome counted once every node has answered. It lives here only for
// BenchmarkFanOut, beside the library's fanOut (docs/design.md, "Fan-out").
func errgroupFanOut(ctx context.Context, nodes []node, need int, timeout time.Duration, o *wire.Op) tally {
	o.Encode()
	results := make([]wire.Result, len(nodes))
	var g errgroup.Group
	for i, n := range nodes {
		g.Go(func() error {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			results[i] = n.(interface {
				do(context.Context, *wire.Op) wire.Result
			}).do(cctx, o)
			return nil
		})
	}
	_ = g.Wait()
	t := tally{n: len(nodes), need: need}
	for _, r := range results {
		if r.OK() {
			t.ok++
		} else {
			t.against++
		}
	}
	return t
}

// hungNode never answers until its call's context ends, like a frozen
// server behind a go-redis client with ContextTimeoutEnabled.
type hungNode struct{}

func (hungNode) do(ctx context.Context, _ *wire.Op) wire.Result {
	<-ctx.Done()
	return wire.Result{Err: ctx.Err()}
}
func (h hungNode) Start(c nodeio.Call) {
	go func() {
		ctx, cancel := context.WithDeadline(c.Ctx, c.Deadline)
		defer cancel()
		c.To.Deliver(c.Index, h.do(ctx, c.Op))
	}()
}
func (hungNode) Name() string { return "hung" }
func (hungNode) Watch(string, func(string, string), func()) func() {
	return func() {}
}

// instantNode answers every call at once, on a goroutine of its own (as a
// node's reply arrives on another goroutine), with the success the call's
// op asks for (a grant, an extension, a release), running nothing. The
// benchmarks of the library's own cost use it, so that they measure the
// library and not an in-memory Redis; the tests use fakeNode, which runs
// the scripts.
type instantNode struct{ id string }

func (n instantNode) Start(c nodeio.Call) {
	go func() { c.To.Deliver(c.Index, n.do(c.Ctx, c.Op)) }() // not go Deliver(…, do()): the Result would go to the heap
}

// do answers at once, for the errgroup fan-out that calls nodes directly.
func (instantNode) do(context.Context, *wire.Op) wire.Result {
	return wire.Result{Status: wire.StatusOK}
}
func (n instantNode) Name() string { return n.id }
func (instantNode) Watch(_ string, _ func(string, string), ready func()) func() {
	ready()
	return func() {}
}

// newBenchClient is a Client over n worker nodes, closed when b ends: each
// answers as an instant node does, on a long-lived goroutine of its own,
// as a node's stream does. Instant nodes, whose goroutine per call grew
// its stack on every delivery, spent a quarter of BenchmarkLockUnlock's
// CPU there (runtime.newstack, 2026-12-03), which no real node costs.
func newBenchClient(b *testing.B, n int, opts ...Option) *Client {
	nodes := make([]node, n)
	for i := range nodes {
		nodes[i] = newWorkerNode(b, fmt.Sprint("worker", i))
	}
	c, err := newClient(nodes, append([]Option{WithAnyNodeCount()}, opts...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// BenchmarkFanOut compares the library's fan-out (decided at a majority,
// stragglers handed to the round's late handler) with an errgroup
// fan-out (a goroutine per node per round; decided when every node has
// answered), over 5 instant nodes: an acquire round and a release round
// per op, healthy and with one node hung. round-p99-ns is the acquire
// round's 99th percentile: Lock's latency when uncontended.
func BenchmarkFanOut(b *testing.B) {
	const timeout = 5 * time.Millisecond
	for _, hung := range []bool{false, true} {
		for _, design := range []string{"library", "errgroup"} {
			b.Run(fmt.Sprintf("hung=%v/design=%s", hung, design), func(b *testing.B) {
				nodes := make([]node, 5)
				for i := range nodes {
					nodes[i] = instantNode{fmt.Sprint("instant", i)}
				}
				if hung {
					nodes[4] = hungNode{}
				}
				var bg background
				defer bg.Wait()
				ctx := context.Background()
				lat := make([]time.Duration, 0, 1<<16)
				failed := 0
				b.ReportAllocs()
				for b.Loop() {
					acq := wire.NewOp(wire.OpAcquire, "redlock:{k}", "tok", "tok", time.Minute)
					rel := wire.NewOp(wire.OpRelease, "redlock:{k}", "tok", "", 0)
					start := time.Now()
					var won bool
					if design == "library" {
						r := fanOut(ctx, request{op: acq, nodes: nodes, need: 3, timeout: timeout, stop: tally.decided})
						won = r.tally.won()
						lat = append(lat, time.Since(start))
						r.finish(&bg, nil)
						fanOut(ctx, request{op: rel, nodes: nodes, need: 3, timeout: timeout}).finish(&bg, nil)
					} else {
						won = errgroupFanOut(ctx, nodes, 3, timeout, acq).won()
						lat = append(lat, time.Since(start))
						errgroupFanOut(ctx, nodes, 3, timeout, rel)
					}
					if !won {
						failed++ // a 5 ms node timeout missed on a busy machine
					}
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)*99/100]), "round-p99-ns")
				b.ReportMetric(float64(failed)/float64(len(lat)), "failed/op")
			})
		}
	}
}
