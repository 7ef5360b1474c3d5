package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// heldNode keeps each call it is given, for the test to answer by hand.
type heldNode struct{ calls chan nodeio.Call }

func newHeldNodes(n int) ([]node, []heldNode) {
	nodes, held := make([]node, n), make([]heldNode, n)
	for i := range held {
		held[i] = heldNode{calls: make(chan nodeio.Call, 4)}
		nodes[i] = held[i]
	}
	return nodes, held
}

func (h heldNode) Start(c nodeio.Call) { h.calls <- c }
func (heldNode) Name() string          { return "held" }
func (heldNode) Watch(string, func(string, string), func()) func() {
	return func() {}
}

// answer delivers status for node i's next call.
func (h heldNode) answer(status wire.Status) {
	c := <-h.calls
	c.To.Deliver(c.Index, wire.Result{Status: status})
}

// TestRoundLateReplies: a round decided at a majority returns at once; the
// replies that come after it, whether before finish or after, reach the
// late handler once each, and their follow-up runs on a goroutine of its
// own (a follow-up that blocks does not block the node that delivered);
// the background count covers both until they are done.
func TestRoundLateReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, held := newHeldNodes(5)
		var bg background
		o := wire.NewOp(wire.OpAcquire, "redlock:{k}", "tok", "tok", time.Minute)
		done := make(chan *round)
		go func() {
			done <- fanOut(context.Background(), request{op: o, nodes: nodes, need: 3, timeout: time.Hour, stop: tally.decided})
		}()
		for _, h := range held[:3] {
			h.answer(wire.StatusOK)
		}
		r := <-done
		require.True(t, r.tally.won())
		require.EqualValues(t, 2, r.pending)

		held[3].answer(wire.StatusOK) // late, before finish: kept for it
		var got []int
		release := make(chan struct{})
		followed := make(chan int, 2)
		r.finish(&bg, func(i int, res wire.Result) func() {
			got = append(got, i)
			return func() {
				<-release
				followed <- i
			}
		})
		require.Equal(t, []int{3}, got, "the reply that came before finish")
		held[4].answer(wire.StatusRefreshed) // late, after finish: handled as it comes
		require.Equal(t, []int{3, 4}, got)

		idle := make(chan struct{})
		go func() { bg.Wait(); close(idle) }()
		synctest.Wait()
		select {
		case <-idle:
			t.Fatal("the background count ended before the follow-ups ran")
		default:
		}
		close(release)
		<-idle
		require.ElementsMatch(t, []int{3, 4}, []int{<-followed, <-followed})
	})
}

// TestRoundOutOfTime: with a context that never ends (no Done channel),
// a round that is not decided ends at its deadline, with the nodes that
// did not answer recorded as such.
func TestRoundOutOfTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, held := newHeldNodes(3)
		o := wire.NewOp(wire.OpAcquire, "redlock:{k}", "tok", "tok", time.Minute)
		done := make(chan *round)
		start := time.Now()
		go func() {
			done <- fanOut(context.Background(), request{op: o, nodes: nodes, need: 2, timeout: 30 * time.Millisecond, stop: tally.decided})
		}()
		held[0].answer(wire.StatusOK)
		r := <-done
		require.Equal(t, 30*time.Millisecond, time.Since(start))
		require.False(t, r.tally.decided() && r.tally.won())
		require.Equal(t, 2, r.tally.against)
		for _, res := range r.results[1:] {
			require.ErrorIs(t, res.Err, context.DeadlineExceeded)
		}
		var bg background
		r.finish(&bg, nil)
		held[1].answer(wire.StatusOK)
		held[2].answer(wire.StatusOK)
		bg.Wait()
	})
}

// TestPostDoesNotWait: post returns with every call started on its node
// (queued there, so nothing sent next overtakes it) and no reply in; the
// background count covers the replies until the last one comes, however
// late, and the calls are detached from the caller's cancellation.
func TestPostDoesNotWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, held := newHeldNodes(3)
		f := &fleet{nodes: nodes}
		ctx, cancel := context.WithCancel(context.Background())
		o := wire.NewOp(wire.OpRelease, "redlock:{k}", "tok", "", 0)
		f.post(ctx, o, nodes, time.Minute)
		cancel()
		for _, h := range held {
			require.Len(t, h.calls, 1, "post returned before a node had its call")
		}
		c := <-held[0].calls
		require.NoError(t, c.Ctx.Err(), "the call must outlive the caller's context")
		require.Equal(t, f.nodeTimeout(time.Minute), time.Until(c.Deadline), "bounded by the node timeout")
		c.To.Deliver(c.Index, wire.Result{Status: wire.StatusOK})
		held[1].answer(wire.StatusOK)

		idle := make(chan struct{})
		go func() { f.bg.Wait(); close(idle) }()
		synctest.Wait()
		select {
		case <-idle:
			t.Fatal("the background count ended before the last reply")
		default:
		}
		held[2].answer(wire.StatusOK)
		<-idle
	})
}

// TestRoundSize: a round over up to 5 nodes, their Results inside it,
// stays within the 704-byte size class (on 64-bit platforms); a round is
// allocated per Lock and per Unlock.
func TestRoundSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the sizes are a 64-bit platform's")
	}
	if got := unsafe.Sizeof(round{}); got > 704 {
		t.Errorf("round is %d bytes, more than the 704-byte size class", got)
	}
}
