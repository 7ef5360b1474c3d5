package redlock

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/wire"
)

// TestGrantScripts holds the scripts of a writer granted the key by a
// release (letin.go) to their answers on a real redis-server: a mutex's
// release sets the key to its live first waiter's place ID, if that
// waiter may be granted it (".wi"), until its place's lapse, marked while
// others wait, takes the place and its look's number out and names that
// number in its notice; it grants no older Client's waiter, no lapsed
// place, and nobody when it hands over inside one Client; the granted
// waiter's look answers LetIn without putting its place back; its attempt
// takes the key from its place's ID; a release by a place's ID takes the
// place out too.
func TestGrantScripts(t *testing.T) {
	rc, run := scriptNode(t)
	ctx := t.Context()
	const lease, ttl = time.Minute, time.Minute
	key := "redlock:{doc}"
	look := func(id string, ticket, seq int64, lease time.Duration) any {
		return run(placeLook(key, wire.ModeMutex, id, ticket, seq, lease))
	}
	release := func(token string, handing bool) any {
		o := wire.NewOp(wire.OpRelease, key, token, "", 0)
		o.Wake, o.WakeOnly = "redlock:wake:", handing
		return run(o)
	}
	acquire := func(token string, p *wire.Place) any {
		o := wire.NewOp(wire.OpAcquire, key, token, token, ttl)
		o.Place = p
		return run(o)
	}
	get := func() string { return rc.Get(ctx, key).Val() }
	queue := func() []string { return rc.ZRange(ctx, key+":queue", 0, -1).Val() }
	notice := noticesOn(t, rc, "redlock:wake:c", "redlock:wake:d")

	require.Equal(t, int64(1), acquire("htok", nil))
	look("c.wi1", 100, 6, lease)
	look("c.wi1", 100, 7, lease) // its last look: the one the grant names
	look("d.2", 200, 0, lease)   // an older Client's writer
	look("c.wi3", 300, 9, lease)
	lapse := rc.ZScore(ctx, key+":lease", "c.wi1").Val()
	require.Equal(t, []any{int64(1), "c.wi1"}, release("htok", false))
	require.Equal(t, "c.wi1\x00\x02", get(), "granted to the place's ID, marked: others wait")
	left := rc.PTTL(ctx, key).Val()
	now := float64(time.Now().UnixMilli()) // this machine's clock is the server's
	require.InDelta(t, lapse-now, float64(left.Milliseconds()), 1000, "until the place's lapse")
	require.Equal(t, []string{"d.2", "c.wi3"}, queue(), "the granted place is out")
	require.Equal(t, []string{"c.wi3"}, rc.ZRange(ctx, key+":seq", 0, -1).Val(), "and its look's number")
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"7\x00c.wi1", notice())

	r := look("c.wi1", 100, 8, lease).([]any)
	require.Equal(t, wire.LetIn, r[0], "a granted waiter's look says so")
	require.Equal(t, int64(-2), r[2])
	require.NotContains(t, queue(), "c.wi1", "and does not put its place back")

	// Its attempt (its notices too few, say) takes the key from its place.
	require.Equal(t, int64(1), acquire("t1", &wire.Place{ID: "c.wi1", Ticket: 100, Lease: lease}))
	require.Equal(t, "t1\x00\x02", get())
	// An older Client's waiter is woken, not granted.
	require.Equal(t, []any{int64(1), "d.2"}, release("t1", false))
	require.Equal(t, "\x00t1", get())
	require.Equal(t, "redlock:wake:d "+key+"\x00t1\x00d.2", notice())

	// A release by a place's ID takes its place (and number) out, and
	// hands the reservation made for the head on.
	look("d.2", 0, 0, lease) // d.2 leaves: c.wi3 is first, and woken (in the name of the release too)
	require.Equal(t, "redlock:wake:c "+key+"\x00d.2\x00c.wi3", notice())
	require.Equal(t, "redlock:wake:c "+key+"\x00t1\x00c.wi3", notice())
	require.Equal(t, int64(0), release("c.wi3", false), "never granted: nothing to release")
	require.Empty(t, queue(), "but its place goes")
	require.Empty(t, rc.ZRange(ctx, key+":seq", 0, -1).Val())
	require.Equal(t, int64(0), rc.Exists(ctx, key).Val(), "nobody left to reserve the key for")

	// The hand-over inside one Client: the release wakes, never grants.
	require.Equal(t, int64(1), acquire("h2", nil))
	look("c.wi5", 500, 1, lease)
	require.Equal(t, []any{int64(1), "c.wi5"}, release("h2", true))
	require.Equal(t, "\x00h2", get(), "reserved for the waiter, whose attempt takes it")
	require.Equal(t, "redlock:wake:c "+key+"\x00h2\x00c.wi5", notice())
	require.Equal(t, int64(1), acquire("t5", &wire.Place{ID: "c.wi5", Ticket: 500, Lease: lease}))

	// Alone in the queue: granted unmarked. A lapsed place: not granted.
	look("c.wi6", 600, 1, lease)
	require.Equal(t, []any{int64(1), "c.wi6"}, release("t5", false))
	require.Equal(t, "c.wi6", get())
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"1\x00c.wi6", notice())
	look("c.wi7", 700, 1, 20*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, int64(1), release("c.wi6", false), "the holder by its place's ID releases")
	require.Equal(t, int64(0), rc.Exists(ctx, key).Val(), "its lapsed place is not granted the key")

	// A read-write lock's writer is granted the key by the last reader's
	// release, not before; a reader's take-back wakes it and grants
	// nothing.
	for _, takeBack := range []bool{true, false} {
		key = "redlock:{rw:doc" + map[bool]string{true: "1", false: "2"}[takeBack] + "}"
		readOp := func(kind wire.Kind, token string, wakeOnly bool) any {
			d := ttl
			if kind == wire.OpRelease {
				d = 0 // a release's is its cooldown
			}
			o := wire.NewOp(kind, key, token, token, d)
			o.Mode, o.Wake, o.WakeOnly = wire.ModeRead, "redlock:wake:", wakeOnly
			return run(o)
		}
		require.Equal(t, int64(1), readOp(wire.OpAcquire, "r1", false))
		require.Equal(t, int64(1), readOp(wire.OpAcquire, "r2", false))
		look("c.wi8", 800, 4, lease)
		require.Equal(t, int64(1), readOp(wire.OpRelease, "r1", false), "a reader is left: nobody is woken")
		require.Equal(t, []any{int64(1), "c.wi8"}, readOp(wire.OpRelease, "r2", takeBack))
		if takeBack {
			require.Equal(t, int64(0), rc.Exists(ctx, key).Val(), "woken, not granted")
			require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.ReadersLeft+"\x00c.wi8", notice())
			continue
		}
		require.Equal(t, "c.wi8", get(), "granted to the writer's place")
		require.Empty(t, queue())
		require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"4\x00c.wi8", notice())
	}
}

// TestGrantedPlaceGoesWithUnlock: a writer granted the key by a release on
// 4 of 5 nodes holds by its place's ID; its place stays on the node where
// another token held the key, and its Unlock takes it out there.
func TestGrantedPlaceGoesWithUnlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		l, waiter, got := heldAndAwaited(t, fakes) // the waiter refused once, and queued on every node
		rkey := waiter.redisKey("k")
		fakes[4].set(rkey, "other", time.Minute)
		require.NoError(t, l.Unlock(t.Context())) // released on 4 of 5, each granting the waiter
		w := <-got
		require.NotNil(t, w)
		require.Contains(t, w.Token(), ".wi", "held by its place's ID")
		queued := func() any { return fakes[4].mem.Do("ZCOUNT", rkey+":queue", "-inf", "+inf") }
		require.EqualValues(t, 1, queued())
		require.NoError(t, w.Unlock(t.Context()))
		synctest.Wait()
		require.EqualValues(t, 0, queued(), "its Unlock left its place where it was not granted")
		for _, f := range fakes[:4] {
			_, ok := f.value(rkey)
			require.False(t, ok)
		}
	})
}

// TestPlaceReleasedFirstWakesNext: a release by a place's ID (a waiter
// that holds elsewhere, or gave up, releasing a grant it may have had)
// that takes the place out from the front of the queue, the key free,
// wakes the next waiter, as a leave from the front does. Before, the
// reservation passed to the next place silently, and its waiter slept
// until its next look (simulator seed 2496: a semaphore's waiter that
// took one slot by its attempt released its place in the other, where a
// take-back had just left the key free for it).
func TestPlaceReleasedFirstWakesNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		c := newTestClient(t, fakes)
		rkey := c.redisKey("k")
		first := &wire.Place{ID: "ZZZZZZZZZZZZZ.wi1", Ticket: 1, Lease: time.Minute}
		for _, f := range fakes {
			f.enqueue(rkey, first) // (free: reserved for it)
		}
		got := make(chan *Lock, 1)
		go func() {
			l, err := c.Lock(ctx, "k", waitHour)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		synctest.Wait() // refused: it waits behind the first place
		time.Sleep(time.Millisecond)
		require.Empty(t, got)

		at := time.Now()
		o := wire.NewOp(wire.OpRelease, rkey, first.ID, "", 0)
		o.Wake = c.hand.wakeArg
		c.post(ctx, o, c.nodes, time.Minute)
		l := <-got
		require.Zero(t, time.Since(at), "the next waiter was not woken by the release of the first place")
		require.NoError(t, l.Unlock(ctx))
	})
}

// TestLookBeforeGrantNoticeWaitsForIt: a waiter whose look finds the key
// granted to its place before it has read the grants' notices (they come
// on the subscription, and the look's answer on another connection) waits
// for them and holds by its place's ID, rather than attempt and take the
// grants with a token of its own, one round more (TestWriterGrantedByRelease
// on real redis-servers, once under load). The test follows the waiter's
// next look, whenever its schedule puts it (a third of its lease, or
// sooner: under -race beside a CPU hog it came a millisecond after the
// release, and a test that slept a third of a lease found it held by its
// attempt), and checks it half a millisecond later.
func TestLookBeforeGrantNoticeWaitsForIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		var armed atomic.Bool
		var looks atomic.Int32
		for _, f := range fakes {
			f.ran = func(o *wire.Op) {
				if armed.Load() && o.Kind == wire.OpQueue {
					looks.Add(1)
				}
			}
		}
		l, _, got := heldAndAwaited(t, fakes)
		gate, unlocked := unlockNoticesHeld(fakes, func() error { return l.Unlock(t.Context()) })
		// Each node granted the waiter's place; the notices wait.
		armed.Store(true)
		// The waiter's next look finds the grants; it then waits a
		// millisecond for their notices (twice the look's round trip,
		// here none) before it attempts.
		for looks.Load() < 2 { // (a majority of 3 answered: the look is decided)
			time.Sleep(50 * time.Microsecond)
			synctest.Wait()
		}
		time.Sleep(500 * time.Microsecond)
		synctest.Wait()
		select {
		case w := <-got:
			t.Fatalf("the waiter held before its notices came: by its attempt, token %q", w.Token())
		default:
		}
		close(gate)
		w := <-got
		require.NotNil(t, w)
		require.Contains(t, w.Token(), ".wi", "held by its place's ID, granted by the release")
		require.NoError(t, <-unlocked)
		require.NoError(t, w.Unlock(t.Context()))
	})
}

// unlockNoticesHeld, inside a synctest bubble, has fakes hold their
// notices until gate is closed, and runs unlock in the background until
// it blocks (on those notices); unlocked has its error.
func unlockNoticesHeld(fakes []*fakeNode, unlock func() error) (gate chan struct{}, unlocked <-chan error) {
	gate = make(chan struct{})
	for _, f := range fakes {
		f.mu.Lock()
		f.noticeGate = gate
		f.mu.Unlock()
	}
	out := make(chan error, 1)
	go func() { out <- unlock() }()
	synctest.Wait()
	return gate, out
}

// heldAndAwaited, inside a synctest bubble: a Client holds "k" on every fake,
// and another's Lock (an hour between its tries) waits for it, refused
// once and queued on every node; got has its Lock when it returns.
func heldAndAwaited(t *testing.T, fakes []*fakeNode) (l *Lock, waiter *Client, got <-chan *Lock) {
	holder := newTestClient(t, fakes)
	waiter = newTestClient(t, fakes)
	l, err := holder.TryLock(t.Context(), "k")
	require.NoError(t, err)
	// TryLock returns at a majority; its calls to the last nodes land
	// before the waiter tries, or the waiter's attempt may take those
	// nodes first and the holder hold on 3 only (1 run in ~300 did).
	synctest.Wait()
	out := make(chan *Lock)
	go func() {
		w, err := waiter.Lock(t.Context(), "k", waitHour)
		if err != nil {
			t.Error(err)
		}
		out <- w
	}()
	synctest.Wait()
	return l, waiter, out
}
