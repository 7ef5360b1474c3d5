package nodeio

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// call is a queued call on key (and, for a multi-key lock, keys), for
// the order tests; nothing is sent.
func call(kind wire.Kind, key string, keys ...string) Call {
	op := wire.NewOp(kind, key, "t", "", time.Minute)
	op.Keys = keys
	return Call{Ctx: context.Background(), Deadline: time.Now().Add(time.Minute), Op: op}
}

// offline is a client the order tests make streams of; it sends nothing.
func offline(t *testing.T) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0", ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

func keysOf(batch []Call) []string {
	var keys []string
	for _, c := range batch {
		keys = append(keys, c.Op.Key)
	}
	return keys
}

// TestTakeKeepsEachKeysOrder: while a batch is out, another lane takes
// the queued calls that share no key with it nor with a call left queued
// before them; the others stay queued, in their order, for a lane to take
// once that batch is back.
func TestTakeKeepsEachKeysOrder(t *testing.T) {
	s := newStream(offline(t), 0)
	first := &lane{s: s, first: true}
	s.first, s.lanes = true, 2
	s.queue = []Call{call(wire.OpAcquirePlain, "a")}
	batch, _ := s.take(first)
	require.Equal(t, []string{"a"}, keysOf(batch), "the first lane takes what is queued")

	s.queue = []Call{
		call(wire.OpRelease, "a"),                // a's batch is out: waits
		call(wire.OpAcquirePlain, "b"),           // free
		call(wire.OpAcquirePlain, "c", "c", "a"), // a multi-key lock with a among its keys: waits
		call(wire.OpAcquirePlain, "c"),           // behind the set that waits on c: waits
		call(wire.OpAcquirePlain, "d", "d", "e"), // free
		call(wire.OpAcquirePlain, "b"),           // behind b, taken in the same batch: same lane, in order
		call(wire.OpAcquirePlain, "e"),           // behind the set on d and e, same batch
	}
	other := &lane{s: s}
	// As if the first batch had just left, however long the test took to
	// get here: a loaded machine (-race, two CPU hogs) took more than
	// laneAfter between the take above and the one below.
	s.out[0].sentAt = time.Now().Add(time.Hour)
	batch, wait := s.take(other)
	require.Nil(t, batch, "no other lane sends before the first's batch has been out laneAfter")
	require.Positive(t, wait)

	s.out[0].sentAt = time.Now().Add(-laneAfter)
	batch, _ = s.take(other)
	assert.Equal(t, []string{"b", "d", "b", "e"}, keysOf(batch))
	assert.Equal(t, []string{"a", "c", "c"}, keysOf(s.queue))

	s.finish(first, []Call{call(wire.OpAcquirePlain, "a")})
	s.finish(other, batch)
	batch, _ = s.take(first)
	assert.Equal(t, []string{"a", "c", "c"}, keysOf(batch), "with no batch out, the first lane takes them all, in order")
}

// TestTakeSendsNoMoreIntoAHungNode: no lane but the first takes calls
// while the oldest batch out is past its calls' deadlines.
func TestTakeSendsNoMoreIntoAHungNode(t *testing.T) {
	s := newStream(offline(t), 0)
	first := &lane{s: s, first: true}
	s.first, s.lanes = true, 2
	late := call(wire.OpAcquirePlain, "a")
	late.Deadline = time.Now().Add(time.Millisecond)
	s.queue = []Call{late}
	batch, _ := s.take(first)
	require.Len(t, batch, 1)
	s.dialed.Store(true) // as if the first lane had its connection, and the node were far:
	s.rttCur = time.Hour // only the node's hanging keeps a lane from opening
	s.out[0].sentAt, s.out[0].until = time.Now().Add(-time.Second), time.Now().Add(-time.Nanosecond)
	s.queue = []Call{call(wire.OpAcquirePlain, "b")}
	batch, wait := s.take(&lane{s: s})
	assert.Nil(t, batch)
	assert.Zero(t, wait)
	assert.False(t, s.more(), "nor is a lane opened for it")
	assert.Equal(t, 2, s.lanes)
}

// TestLanesNeedBoundedReads: a client whose reads nothing bounds gets one
// lane per node, since a lane readying its connection to a node that
// hangs would wait for it without end; one whose reads are bounded, by
// ReadTimeout or by the context, gets up to a quarter of its pool.
func TestLanesNeedBoundedReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  redis.Options
		want int
	}{
		{"defaults", redis.Options{}, min(10*runtime.GOMAXPROCS(0)/4, maxLanes)},
		{"context", redis.Options{ReadTimeout: -1, ContextTimeoutEnabled: true}, min(10*runtime.GOMAXPROCS(0)/4, maxLanes)},
		{"unbounded", redis.Options{ReadTimeout: -1}, 1},
		{"no deadlines", redis.Options{ReadTimeout: -2}, 1},
		{"small pool", redis.Options{PoolSize: 6}, 1},
		{"pool of 8", redis.Options{PoolSize: 8}, 2},
		{"pool of 32", redis.Options{PoolSize: 32}, 8},
		{"pool of 100", redis.Options{PoolSize: 100}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Addr = "127.0.0.1:0"
			rc := redis.NewClient(&tc.opt)
			defer func() { _ = rc.Close() }()
			assert.Equal(t, tc.want, newStream(rc, 0).maxLanes)
		})
	}
}

// TestFinishWakesTheFirstLane: a call held back because it shares a key
// with another lane's batch is the first lane's to take once that batch
// is back, and the first lane is woken for it. Without that, the first
// lane, woken when the call was queued and finding it held back, waited
// until the next call or its idle time, past the call's deadline (a
// release on a healthy node answered "not sent", TestStreamGivesUpAtDeadline
// beside two CPU hogs, once in 300 runs).
func TestFinishWakesTheFirstLane(t *testing.T) {
	s := newStream(offline(t), 0)
	first, other := &lane{s: s, first: true}, &lane{s: s}
	s.first, s.lanes = true, 2
	s.queue = []Call{call(wire.OpAcquirePlain, "a")}
	batch, _ := s.take(first)
	require.Len(t, batch, 1)
	s.queue = []Call{call(wire.OpAcquirePlain, "b")}
	s.out[0].sentAt = time.Now().Add(-laneAfter)
	taken, _ := s.take(other)
	require.Len(t, taken, 1, "the other lane takes b")
	s.finish(first, batch)
	s.queue = []Call{call(wire.OpRelease, "b")}
	batch, _ = s.take(first)
	require.Nil(t, batch, "b's release waits for b's acquire, out on the other lane")
	select {
	case <-s.wake:
	default:
	}
	s.finish(other, taken)
	select {
	case <-s.wake:
	default:
		t.Fatal("the other lane's batch is back and b's release is queued, but the first lane was not woken")
	}
	batch, _ = s.take(first)
	assert.Equal(t, []string{"b"}, keysOf(batch))
}

// TestLanesOnlyForFarNodes: a node is far, and gets lanes beside the
// first, only while every batch of the last window or two took laneAfter
// or longer; one fast batch makes it near for up to two windows.
func TestLanesOnlyForFarNodes(t *testing.T) {
	s := newStream(offline(t), 0)
	assert.False(t, s.far(), "before any batch")
	t0 := time.Now()
	s.sample(5*time.Millisecond, t0)
	assert.True(t, s.far(), "its first batch took 5 ms")
	s.sample(50*time.Microsecond, t0.Add(rttWindow/2))
	assert.False(t, s.far(), "one batch of this window took 50 µs")
	s.sample(5*time.Millisecond, t0.Add(rttWindow))
	assert.False(t, s.far(), "and the window before still has it")
	s.sample(5*time.Millisecond, t0.Add(2*rttWindow))
	assert.True(t, s.far(), "two windows of batches that all took 5 ms")
	s.sample(laneAfter-time.Nanosecond, t0.Add(2*rttWindow+time.Millisecond))
	assert.False(t, s.far())
}
