package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// sendHeld sends a pooled acquire round, with a pooled op, over nodes
// (need: a majority, decided early) on a goroutine, and returns it once
// collected.
func sendHeld(f *fleet, timeout time.Duration, answer func()) *round {
	t := target{key: "k", rkey: "redlock:{k}"}
	o := t.pooledOp(wire.OpAcquire, "tok", "tok", time.Minute)
	done := make(chan *round)
	go func() {
		done <- f.sendPooled(context.Background(), request{op: o, pooledOp: true, need: f.quorum(), timeout: timeout, stop: tally.decided})
	}()
	answer()
	return <-done
}

// requireNotPooled fails if the fleet's pool hands out r.
func requireNotPooled(t *testing.T, f *fleet, r *round) {
	t.Helper()
	for range 3 {
		got, _ := f.rounds.Get().(*round)
		require.False(t, got == r, "the pool handed out a round still held")
	}
}

// TestPooledRoundWaitsForLateReplies: a pooled round the caller recycled
// as soon as a majority answered stays out of the pool while any node's
// call is still out, and goes back, emptied, once the last one delivered.
func TestPooledRoundWaitsForLateReplies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, held := newHeldNodes(5)
		f := &fleet{nodes: nodes}
		r := sendHeld(f, time.Minute, func() {
			for _, h := range held[:3] {
				h.answer(wire.StatusOK)
			}
		})
		require.True(t, r.tally.won())
		var bg background
		r.finish(&bg, nil)
		r.recycle()
		require.EqualValues(t, 2, r.refs.Load(), "the two calls still out")
		requireNotPooled(t, f, r)

		o := r.op
		held[3].answer(wire.StatusOK)
		requireNotPooled(t, f, r)
		require.Equal(t, "redlock:{k}", o.Key, "its op still out, whole")
		held[4].answer(wire.StatusOK)
		bg.Wait()
		require.Zero(t, r.tally, "emptied for its next use")
		require.Nil(t, r.op, "its op gone back with it")
		require.Empty(t, o.Key, "emptied")
		require.Nil(t, r.late)
		require.NotNil(t, r.pool)
		if got, _ := f.rounds.Get().(*round); got != nil { // (the race detector's pool drops some)
			require.Same(t, r, got)
		}
	})
}

// TestPooledRoundTimer: a round that ended at its deadline is held by its
// timer until outOfTime has run, and by its late calls until they
// delivered; its timer is kept for its next use.
func TestPooledRoundTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, held := newHeldNodes(3)
		f := &fleet{nodes: nodes}
		start := time.Now()
		r := sendHeld(f, 30*time.Millisecond, func() { held[0].answer(wire.StatusOK) })
		require.Equal(t, 30*time.Millisecond, time.Since(start), "woken by its timer")
		require.False(t, r.tally.won())
		timer := r.timer
		require.NotNil(t, timer)
		var bg background
		r.finish(&bg, nil)
		r.recycle()
		synctest.Wait() // outOfTime has returned
		require.EqualValues(t, 2, r.refs.Load(), "the two calls still out; not the timer")

		held[1].answer(wire.StatusOK)
		held[2].answer(wire.StatusOK)
		bg.Wait()
		require.Zero(t, r.tally)
		require.Same(t, timer, r.timer, "kept")
	})
}

// syncNode grants every call inside Start.
type syncNode struct{}

func (syncNode) Start(c nodeio.Call) { c.To.Deliver(c.Index, wire.Result{Status: wire.StatusOK}) }
func (syncNode) Name() string        { return "sync" }
func (syncNode) Watch(string, func(string, string), func()) func() {
	return func() {}
}

// TestPooledRoundDrainsWake: a round decided before its caller waited
// (every node answered inside Start) leaves its wake-up unread; the round
// goes back to the pool without it, else its next caller would be woken
// before any reply.
func TestPooledRoundDrainsWake(t *testing.T) {
	nodes := []node{syncNode{}, syncNode{}, syncNode{}}
	f := &fleet{nodes: nodes}
	o := wire.NewOp(wire.OpAcquire, "redlock:{k}", "tok", "tok", time.Minute)
	r := f.sendPooled(context.Background(), request{op: o, need: 2, timeout: time.Minute, stop: tally.decided})
	require.True(t, r.tally.won())
	require.Len(t, r.wake, 1, "the wake-up nobody waited for")
	r.finish(&f.bg, nil)
	r.recycle()
	require.Zero(t, r.refs.Load())
	require.Empty(t, r.wake, "drained before the round went back")
}

// TestPooledRoundDropsSecondDelivery: a node that delivered twice for one
// call is counted once, and takes one holder, not two.
func TestPooledRoundDropsSecondDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, held := newHeldNodes(3)
		f := &fleet{nodes: nodes}
		r := sendHeld(f, time.Minute, func() {
			c := <-held[0].calls
			c.To.Deliver(c.Index, wire.Result{Status: wire.StatusOK})
			c.To.Deliver(c.Index, wire.Result{Status: wire.StatusOK})
			held[1].answer(wire.StatusHeld)
			held[2].answer(wire.StatusOK)
		})
		require.Equal(t, 2, r.tally.ok)
		require.Equal(t, 1, r.tally.against)
		require.EqualValues(t, 1, r.refs.Load(), "the caller's only")
		r.recycle()
		require.Zero(t, r.tally)
	})
}

// TestEverydayRoundsPooled: a Lock's acquire round and its Unlock's
// release round come from the Client's pool, and go back to it: over 50
// cycles, some of the 100 rounds taken were ones used before.
func TestEverydayRoundsPooled(t *testing.T) {
	c := newTestClient(t, newFakeNodes(5))
	var missed atomic.Int64
	c.rounds.New = func() any { missed.Add(1); return nil } // a round made afresh
	ctx := context.Background()
	for range 50 {
		l, err := c.Lock(ctx, "k")
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	require.Positive(t, missed.Load(), "no round taken from the pool")
	require.Less(t, missed.Load(), int64(100), "no round came back to the pool")
}
