package redlock

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// The read-write lock's order (issue 28): readers and writers wait in the
// key's one queue; the readers ahead of a writer enter together, before
// it, and those that come while it waits enter after it.

// TestRWMutexPhaseOrder: with a reader in, a writer waits; readers that
// come after it wait behind it (two of them, in two Clients), and so does
// a second writer that comes after them. When the reader leaves, the
// writer gets the lock at that instant; when it leaves, both readers get
// in together at that instant (woken by its release's notices: every
// strategy waits an hour); the second writer only after both have left.
func TestRWMutexPhaseOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		c1, c2 := newTestClient(t, fakes), newTestClient(t, fakes)
		ctx := t.Context()
		m1, err := c1.RWMutex("doc", waitHour)
		require.NoError(t, err)
		m2, err := c2.RWMutex("doc", waitHour)
		require.NoError(t, err)
		first, err := m1.TryRLock(ctx)
		require.NoError(t, err)

		var order syncList[string]
		in := map[string]chan *Lock{}
		var wg sync.WaitGroup
		start := func(who string, lock func() (*Lock, error)) {
			ch := make(chan *Lock, 1)
			in[who] = ch
			wg.Go(func() {
				l, err := lock()
				if err != nil {
					t.Errorf("%s: %v", who, err)
					return
				}
				order.add(who)
				ch <- l
			})
			synctest.Wait() // refused, and queued
			time.Sleep(time.Millisecond)
		}
		start("writer 1", func() (*Lock, error) { return m2.Lock(ctx) })
		start("reader 2", func() (*Lock, error) { return m1.RLock(ctx) })
		start("reader 3", func() (*Lock, error) { return m2.RLock(ctx) })
		start("writer 4", func() (*Lock, error) { return m1.Lock(ctx) })
		require.Empty(t, order.get(), "someone got in beside the first reader or ahead of the writer")

		at := time.Now()
		require.NoError(t, first.Unlock(ctx))
		w1 := <-in["writer 1"]
		require.Zero(t, time.Since(at), "the writer was not woken by the last reader's release")
		synctest.Wait()
		require.Equal(t, []string{"writer 1"}, order.get())

		time.Sleep(time.Second)
		at = time.Now()
		require.NoError(t, w1.Unlock(ctx))
		r2, r3 := <-in["reader 2"], <-in["reader 3"]
		require.Zero(t, time.Since(at), "the readers were not woken by the writer's release")
		synctest.Wait()
		require.ElementsMatch(t, []string{"reader 2", "reader 3"}, order.get()[1:], "the readers behind the writer, together")

		time.Sleep(time.Second)
		require.NoError(t, r2.Unlock(ctx))
		synctest.Wait()
		require.Len(t, order.get(), 3, "the second writer got in beside a reader")
		at = time.Now()
		require.NoError(t, r3.Unlock(ctx))
		w4 := <-in["writer 4"]
		require.Zero(t, time.Since(at), "the second writer was not woken by the last reader's release")
		require.NoError(t, w4.Unlock(ctx))
		wg.Wait()
	})
}

// TestRWMutexReaderNotStarved: two writers that take turns with no gap
// (each goes back for the lock as soon as it leaves) would keep a reader
// out for good if it did not queue; it gets in after the writers that
// queued before it, within the holdings of those.
func TestRWMutexReaderNotStarved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		ctx := t.Context()
		writers := make([]*RWMutex, 2)
		for i := range writers {
			m, err := newTestClient(t, fakes).RWMutex("doc", waitHour)
			require.NoError(t, err)
			writers[i] = m
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		defer wg.Wait() // after stop is closed, also when the test fails
		for _, m := range writers {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					w, err := m.Lock(ctx)
					if err != nil {
						select {
						case <-stop:
						default:
							t.Error(err)
						}
						return
					}
					time.Sleep(10 * time.Millisecond)
					if err := w.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		time.Sleep(time.Second) // the writers take turns
		reader, err := newTestClient(t, fakes).RWMutex("doc", waitHour)
		require.NoError(t, err)
		asked := time.Now()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := reader.RLock(rctx)
		close(stop)
		require.NoError(t, err, "the reader starved")
		// Ahead of it at most: the holder, and the other writer queued.
		require.LessOrEqual(t, time.Since(asked), 20*time.Millisecond, "the reader waited past the writers ahead of it")
		require.NoError(t, r.Unlock(ctx))
	})
}

// TestReaderAcquireScript pins what a reader's acquire script answers, on
// a real redis-server: a reader whose place the node lost is put back
// where its ticket says (let in ahead of a later writer, refused behind
// an earlier one, its place kept), a queued reader refused by a writer
// holding has its place refreshed, a lapsed entry of a reader's token is
// not re-entry, and a live one is.
func TestReaderAcquireScript(t *testing.T) {
	rc, run := scriptNode(t)
	ctx := t.Context()
	const lease, ttl = time.Minute, time.Minute
	reader := func(key, token, id string, ticket int64) *wire.Op {
		o := wire.NewOp(wire.OpAcquire, key, token, token, ttl)
		o.Mode = wire.ModeRead
		if id != "" {
			o.Place = &wire.Place{ID: id, Ticket: ticket, Lease: lease}
		}
		return o
	}
	queueOf := func(key string) []string { return rc.ZRange(ctx, key+":queue", 0, -1).Val() }
	key := "redlock:{readers}"
	w := wire.NewOp(wire.OpQueue, key, "", "", 0)
	w.Mode, w.Place, w.Wake = wire.ModeWrite, &wire.Place{ID: "w.1", Ticket: 200, Lease: lease}, "redlock:wake:"
	run(w)
	require.Equal(t, int64(1), run(reader(key, "r1", "a.r1", 100)), "a lost place ahead of the writer: let in")
	got := run(reader(key, "r2", "b.r2", 300))
	require.Equal(t, "w.1", got.([]any)[2], "a lost place behind the writer: refused, naming it")
	require.Equal(t, []string{"w.1", "b.r2"}, queueOf(key), "the refused reader's place is back behind the writer")

	held := "redlock:{held}"
	require.NoError(t, rc.Set(ctx, held, "wtoken", ttl).Err())
	got = run(reader(held, "r3", "c.r3", 100))
	require.Equal(t, "wtoken", got.([]any)[1], "a writer holds: refused, naming its token")
	require.Equal(t, []string{"c.r3"}, queueOf(held), "the refused reader's place is kept")

	lapsed := "redlock:{lapsed}"
	require.NoError(t, rc.ZAdd(ctx, lapsed+":readers", redis.Z{Score: 1, Member: "r4"}).Err())
	require.Equal(t, int64(1), run(reader(lapsed, "r4", "", 0)), "a lapsed entry of the token: a new reader")
	require.Equal(t, int64(2), run(reader(lapsed, "r4", "", 0)), "a live one: re-entry")
}

// placeLook is a look at key's queue, as a Client sends it, for the place
// id (ticket 0: its leave), numbered seq (0: none), whose wake goes to
// "redlock:wake:" and the Client's ID.
func placeLook(key string, mode wire.Mode, id string, ticket, seq int64, lease time.Duration) *wire.Op {
	o := wire.NewOp(wire.OpQueue, key, "", "", 0)
	o.Mode, o.Place, o.Wake, o.Seq = mode, &wire.Place{ID: id, Ticket: ticket, Lease: lease}, "redlock:wake:", seq
	return o
}

// scriptNode starts a redis-server for a test of the scripts, and returns
// a client of it and a function that runs an op's script there.
func scriptNode(t *testing.T) (*redis.Client, func(o *wire.Op) any) {
	rc := redis.NewClient(&redis.Options{Addr: redistest.Start(t, 1)[0].Addr})
	t.Cleanup(func() { _ = rc.Close() })
	return rc, func(o *wire.Op) any {
		o.Encode()
		v, err := rc.Do(t.Context(), o.EvalArgs(0)...).Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// noticesOn subscribes to channels on the script node rc (confirmed before
// it returns) and returns the next notice's channel and payload, joined by
// a space, at each call.
func noticesOn(t *testing.T, rc *redis.Client, channels ...string) func() string {
	sub := rc.Subscribe(t.Context(), channels...)
	t.Cleanup(func() { _ = sub.Close() })
	for range channels {
		_, err := sub.Receive(t.Context())
		require.NoError(t, err)
	}
	return func() string {
		m, err := sub.ReceiveMessage(t.Context())
		require.NoError(t, err)
		return m.Channel + " " + m.Payload
	}
}
