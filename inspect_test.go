package redlock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInspect(t *testing.T) {
	synctest.Test(t, testInspect)
}

func testInspect(t *testing.T) {
	fakes := newFakeNodes(5)
	c := newTestClient(t, fakes)
	s, err := c.Inspect(t.Context(), "k")
	require.NoError(t, err)
	_, _, ok := s.Holder()
	require.False(t, ok, "empty key has a holder")
	require.Zero(t, s.Remaining(), "empty key")
	l := lockAll(t, c, "k", WithTTL(10*time.Second), WithMetadata("host=a pid=1"))
	fakes[0].set("redlock:{k}", l.Token(), time.Second)
	fakes[1].set("redlock:{k}", l.Token(), 2*time.Second)
	fakes[3].set("redlock:{k}", "other", -1)
	fakes[4].setErr(errFakeDown)
	s, err = c.Inspect(t.Context(), "k")
	require.NoError(t, err)
	holder, meta, ok := s.Holder()
	require.True(t, ok)
	require.Equal(t, holderID(l.Token()), holder)
	require.Equal(t, "host=a pid=1", meta)
	require.Equal(t, time.Second, s.Remaining(), "the third-longest of 1 s, 2 s and 10 s")
	require.True(t, s.Nodes[3].Held)
	require.Equal(t, holderID("other"), s.Nodes[3].Holder)
	require.EqualValues(t, -1, s.Nodes[3].TTL)
	for _, n := range s.Nodes {
		require.Empty(t, n.Token, "%s: Inspect showed a token to a caller that did not give it", n.Node)
	}
	// The holder that gives its own token sees it, on its nodes only.
	s, err = c.Inspect(t.Context(), "k", WithToken(l.Token()))
	require.NoError(t, err)
	for i, want := range []string{l.Token(), l.Token(), l.Token(), "", ""} {
		require.Equal(t, want, s.Nodes[i].Token, "node %d", i)
	}
	_, err = c.Inspect(t.Context(), "k", WithTTL(time.Second))
	require.ErrorIs(t, err, ErrInvalidArgument, "Inspect takes only WithToken")
	require.Error(t, s.Nodes[4].Err)
	require.False(t, s.Nodes[4].Held)
	_, err = c.Inspect(t.Context(), "")
	require.ErrorIs(t, err, ErrInvalidArgument, "empty key")
}

// TestInspectQueue: Inspect shows, per node, how many Lock calls wait in
// the key's queue and which is first; a place whose lease lapsed is not
// counted.
func TestInspectQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		holder := newTestClient(t, fakes)
		waiters := newTestClient(t, fakes)
		l, err := holder.TryLock(t.Context(), "k")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		for range 2 {
			go func() { _, _ = waiters.Lock(ctx, "k", waitHour) }()
			synctest.Wait()
			time.Sleep(time.Microsecond) // tickets in this order
		}
		s, err := holder.Inspect(t.Context(), "k")
		require.NoError(t, err)
		first := waiters.hand.id + ".wi1" // a writer a release may grant the key (see grantable)
		for _, n := range s.Nodes {
			require.Equal(t, 2, n.Waiting, n.Node)
			require.Equal(t, first, n.FirstWaiter, n.Node)
		}
		// A place that lapses (its Lock gone without leaving) is not
		// counted once its lease is over. It is planted, not a live
		// waiter's: a live one puts its place back at its next look,
		// which can come within the lease (a plain attempt's refusal
		// names no PTTL, and the look after it comes 1 ms later).
		for _, f := range fakes {
			f.mem.Do("ZADD", holder.redisKey("k")+":queue", 1, "gone.1")
			f.setLease(holder.redisKey("k"), "gone.1", time.Millisecond)
		}
		s, err = holder.Inspect(t.Context(), "k")
		require.NoError(t, err)
		require.Equal(t, 3, s.Nodes[0].Waiting)
		require.Equal(t, "gone.1", s.Nodes[0].FirstWaiter)
		time.Sleep(2 * time.Millisecond)
		s, err = holder.Inspect(t.Context(), "k")
		require.NoError(t, err)
		require.Equal(t, 2, s.Nodes[0].Waiting)
		require.Equal(t, first, s.Nodes[0].FirstWaiter)
		cancel()
		synctest.Wait()
		require.NoError(t, l.Unlock(t.Context()))
	})
}

// TestInspectWaitersOfEveryPrimitive: a read-write lock's queue holds its
// waiting readers beside its writers, and Inspect tells them apart; a
// set's waiter is in the queue of each of its keys, and a semaphore's in
// that of each slot, under one ID.
func TestInspectWaitersOfEveryPrimitive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		holder, waiters := newTestClient(t, fakes), newTestClient(t, fakes)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		wait := func(lock func(context.Context) (*Lock, error)) {
			go func() { _, _ = lock(ctx) }()
			synctest.Wait()
			time.Sleep(time.Microsecond) // tickets in this order
		}
		rw, err := holder.RWMutex("doc")
		require.NoError(t, err)
		w, err := rw.TryLock(t.Context())
		require.NoError(t, err)
		theirs, err := waiters.RWMutex("doc", waitHour)
		require.NoError(t, err)
		wait(theirs.RLock)
		wait(theirs.Lock)
		wait(theirs.RLock)
		s, err := rw.Inspect(t.Context())
		require.NoError(t, err)
		for _, n := range s.Nodes {
			require.Equal(t, 3, n.Waiting, n.Node)
			require.Equal(t, 2, n.WaitingReaders, n.Node)
			require.Equal(t, waiters.hand.id+".ri1", n.FirstWaiter, n.Node)
		}

		set, err := holder.MultiLock([]string{"a", "b"})
		require.NoError(t, err)
		ls, err := set.TryLock(t.Context())
		require.NoError(t, err)
		theirSet, err := waiters.MultiLock([]string{"b", "c"}, waitHour)
		require.NoError(t, err)
		wait(theirSet.Lock)
		states, err := theirSet.Inspect(t.Context())
		require.NoError(t, err)
		requireOneWaiter(t, states, waiters.hand.id+".wis4") // a release may grant it a key, and its other keys

		sem, err := holder.Semaphore("pool", 2)
		require.NoError(t, err)
		for range 2 {
			_, err := sem.TryAcquire(t.Context())
			require.NoError(t, err)
		}
		theirSem, err := waiters.Semaphore("pool", 2, waitHour)
		require.NoError(t, err)
		wait(theirSem.Acquire)
		slots, err := sem.Inspect(t.Context())
		require.NoError(t, err)
		requireOneWaiter(t, slots, waiters.hand.id+".wi5") // a release may grant it a slot
		cancel()
		synctest.Wait()
		require.NoError(t, w.Unlock(t.Context()))
		require.NoError(t, ls.Unlock(t.Context()))
	})
}

// requireOneWaiter checks that each key of states (a set's keys, a
// semaphore's slots) has one waiter, id, on every node.
func requireOneWaiter(t *testing.T, states []*KeyState, id string) {
	t.Helper()
	for i, st := range states {
		for _, n := range st.Nodes {
			require.Equal(t, 1, n.Waiting, "key %d, node %s", i, n.Node)
			require.Equal(t, id, n.FirstWaiter, "key %d, node %s", i, n.Node)
		}
	}
}

// TestInspectManyKeysOneTimeout: inspecting a semaphore's slots or a
// multi-key lock's keys asks each node about every key at once, so nodes
// that never answer cost one node timeout, however many keys, and the
// nodes that answer tell about every key.
func TestInspectManyKeysOneTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 100 * time.Millisecond
		fakes := newFakeNodes(5)
		c := newTestClient(t, fakes, WithNodeTimeout(timeout))
		s, err := c.Semaphore("s", 16)
		require.NoError(t, err)
		permit, err := s.TryAcquire(t.Context())
		require.NoError(t, err)
		m, err := c.MultiLock([]string{"a", "b", "c", "d"})
		require.NoError(t, err)
		l, err := m.TryLock(t.Context())
		require.NoError(t, err)
		synctest.Wait()
		hung := make(chan struct{}) // frozen nodes: never answer, whatever the context says
		fakes[1].setGate(hung)
		fakes[3].setGate(hung)
		defer close(hung)

		start := time.Now()
		slots, err := s.Inspect(t.Context())
		require.NoError(t, err)
		require.Equal(t, timeout, time.Since(start), "16 slots with 2 of 5 nodes frozen")
		held := 0
		for _, st := range slots {
			for _, i := range []int{1, 3} {
				require.ErrorIs(t, st.Nodes[i].Err, context.DeadlineExceeded)
			}
			if h, _, ok := st.Holder(); ok {
				held++
				require.Equal(t, holderID(permit.Token()), h)
			}
		}
		require.Equal(t, 1, held, "slots held")

		start = time.Now()
		keys, err := m.Inspect(t.Context())
		require.NoError(t, err)
		require.Equal(t, timeout, time.Since(start), "4 keys with 2 of 5 nodes frozen")
		require.Len(t, keys, 4)
		for _, st := range keys {
			h, _, ok := st.Holder()
			require.True(t, ok)
			require.Equal(t, holderID(l.Token()), h)
		}
	})
}
