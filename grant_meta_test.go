package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/wire"
)

// TestMetadataGrantScripts holds the scripts of a waiter with metadata
// granted the key by a release to their answers on a real redis-server:
// each look of its place (".wim", ".wifm" fenced) keeps its metadata in
// KEY:val:ID for as long as the place lives; a release sets the key to
// the place's ID, NUL and that metadata (marked where others wait), says
// so in its notice (a 'v' after the look's number and any fence), and
// the value key goes with the place; where the value key is gone (it
// lapsed), the release wakes the waiter to attempt instead of granting
// it a key without its metadata. A fenced one is granted with the
// releaser's proposal, as a fenced waiter is; the last reader's release
// and a set's release grant a writer its metadata too.
func TestMetadataGrantScripts(t *testing.T) {
	rc, run := scriptNode(t)
	ctx := t.Context()
	const lease, ttl = time.Minute, time.Minute
	key := "redlock:{meta}"
	look := func(id string, ticket, seq int64, meta string) {
		o := placeLook(key, wire.ModeMutex, id, ticket, seq, lease)
		o.Value = meta
		run(o)
	}
	release := func(token string, proposal int64) any {
		o := wire.NewOp(wire.OpRelease, key, token, "", 0)
		o.Wake, o.Fence = "redlock:wake:", proposal
		return run(o)
	}
	get := func() string { return rc.Get(ctx, key).Val() }
	valueKey := func(id string) string { return rc.Get(ctx, key+":val:"+id).Val() }
	notice := noticesOn(t, rc, "redlock:wake:c")

	require.Equal(t, int64(1), run(wire.NewOp(wire.OpAcquire, key, "htok", "htok", ttl)))
	look("c.wim1", 100, 6, "host=a")
	look("c.wim1", 100, 7, "host=a") // its last look: the one the grant names
	look("c.wim2", 200, 3, "host=b")
	require.Equal(t, "host=a", valueKey("c.wim1"), "each look keeps the place's metadata")
	require.InDelta(t, lease.Milliseconds(), rc.PTTL(ctx, key+":val:c.wim1").Val().Milliseconds(), 1000, "for the place's lease")
	require.Equal(t, []any{int64(1), "c.wim1"}, release("htok", 0))
	require.Equal(t, "c.wim1\x00\x02host=a", get(), "granted to the place's ID with its metadata, marked: another waits")
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"7v\x00c.wim1", notice())
	require.Zero(t, rc.Exists(ctx, key+":val:c.wim1").Val(), "the value goes with the place")

	// The next one's value lapsed: woken to attempt, not granted a key
	// without its metadata.
	rc.Del(ctx, key+":val:c.wim2")
	require.Equal(t, []any{int64(1), "c.wim2"}, release("c.wim1", 0))
	require.Equal(t, "\x00c.wim1", get(), "reserved for the waiter, whose attempt takes it")
	require.Equal(t, "redlock:wake:c "+key+"\x00c.wim1\x00c.wim2", notice())
	a := wire.NewOp(wire.OpAcquire, key, "t2", wire.EncodeValue("t2", "host=b"), ttl)
	a.Place = &wire.Place{ID: "c.wim2", Ticket: 200, Lease: lease}
	require.Equal(t, int64(1), run(a))
	require.Equal(t, "t2\x00host=b", get())

	// Fenced, with metadata: the proposal is its token, named in the
	// notice; the metadata is set beside its ID.
	const p = 1000*wire.FenceModulus + wire.FenceModulus - 1
	look("c.wifm3", 300, 2, "host=c")
	require.Equal(t, []any{int64(1), "c.wifm3"}, release("t2", p))
	require.Equal(t, "c.wifm3\x00host=c", get())
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"2f"+strconv.Itoa(p)+"v\x00c.wifm3", notice())
	require.Equal(t, int64(1), release("c.wifm3", 0))
	require.Zero(t, rc.Exists(ctx, key).Val())

	// The last reader's release grants a writer its metadata.
	key = "redlock:{rw:meta}"
	read := wire.NewOp(wire.OpAcquire, key, "r1", "r1", ttl)
	read.Mode = wire.ModeRead
	require.Equal(t, int64(1), run(read))
	look("c.wim4", 400, 5, "host=d")
	out := wire.NewOp(wire.OpRelease, key, "r1", "r1", 0)
	out.Mode, out.Wake = wire.ModeRead, "redlock:wake:"
	require.Equal(t, []any{int64(1), "c.wim4"}, run(out))
	require.Equal(t, "c.wim4\x00host=d", get())
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"5v\x00c.wim4", notice())
	require.Zero(t, rc.Exists(ctx, key+":val:c.wim4").Val())

	// A set's release grants a one-key waiter on one of its keys its
	// metadata.
	keys := []string{"redlock:{s1}", "redlock:{s2}"}
	set := wire.NewOp(wire.OpAcquire, keys[0], "st", "st", ttl)
	set.Keys, set.Mode = keys, wire.ModeSet
	require.Equal(t, int64(1), run(set))
	key = keys[1]
	look("c.wim5", 500, 8, "host=e")
	free := wire.NewOp(wire.OpRelease, keys[0], "st", "st", 0)
	free.Keys, free.Mode, free.Wake = keys, wire.ModeSet, "redlock:wake:"
	run(free)
	require.Equal(t, "c.wim5\x00host=e", get())
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"8v\x00c.wim5", notice())

	// A set with metadata (".wism"): its look keeps the metadata at each
	// key, and the release of one key grants it that key and the free
	// other with it; where the other's value is gone, only the released
	// key is granted (the other stays reserved for the set's look or
	// attempt).
	keys = []string{"redlock:{s}:a", "redlock:{s}:b"}
	setLook := func(id string, ticket, seq int64) {
		o := wire.NewOp(wire.OpQueue, keys[0], "", "", 0)
		o.Keys, o.Mode, o.Value = keys, wire.ModeSet, "host=f"
		o.Place, o.Wake, o.Seq = &wire.Place{ID: id, Ticket: ticket, Lease: lease}, "redlock:wake:", seq
		run(o)
	}
	for i, drop := range []bool{false, true} {
		id := "c.wism" + strconv.Itoa(6+i)
		require.Equal(t, int64(1), run(wire.NewOp(wire.OpAcquire, keys[0], "ha", "ha", ttl)))
		setLook(id, int64(600+i), 9)
		for _, k := range keys {
			require.Equal(t, "host=f", rc.Get(ctx, k+":val:"+id).Val(), "its look keeps its metadata at %s", k)
		}
		if drop {
			rc.Del(ctx, keys[1]+":val:"+id)
		}
		free := wire.NewOp(wire.OpRelease, keys[0], "ha", "", 0)
		free.Wake = "redlock:wake:"
		require.Equal(t, []any{int64(1), id}, run(free))
		require.Equal(t, id+"\x00host=f", rc.Get(ctx, keys[0]).Val())
		if drop {
			require.True(t, wire.IsReserved(rc.Get(ctx, keys[1]).Val()), "reserved for the set, not granted")
			require.Equal(t, "redlock:wake:c "+keys[0]+"\x00"+wire.LetIn+"9v\x00"+id, notice())
		} else {
			require.Equal(t, id+"\x00host=f", rc.Get(ctx, keys[1]).Val())
			got := []string{notice(), notice()}
			require.ElementsMatch(t, []string{
				"redlock:wake:c " + keys[0] + "\x00" + wire.LetIn + "9v\x00" + id,
				"redlock:wake:c " + keys[1] + "\x00" + wire.LetIn + "9v\x00" + id,
			}, got)
		}
		rc.Del(ctx, keys[0], keys[1], keys[0]+":queue", keys[1]+":queue", keys[0]+":lease", keys[1]+":lease")
	}
}

// metadataHandOff has another Client's Lock, with metadata and opts, wait
// behind a holder (TryLock with opts) that then releases, on fakes; it
// returns the two locks, how many acquire attempts the nodes were sent
// after the release, and the metadata Inspect shows then.
func metadataHandOff(t *testing.T, fakes []*fakeNode, opts ...Option) (held, next *Lock, attempts int32, shown string) {
	released, n := attemptsAfter(fakes)
	holder, waiter := newTestClient(t, fakes), newTestClient(t, fakes)
	h, err := holder.TryLock(t.Context(), "k", opts...)
	require.NoError(t, err)
	next = handedTo(t, h, released, func(ctx context.Context) (*Lock, error) {
		return waiter.Lock(ctx, "k", append([]Option{WithMetadata("host=b")}, opts...)...)
	})
	attempts = n.Load()
	s, err := holder.Inspect(t.Context(), "k")
	require.NoError(t, err)
	holderOf, shown, ok := s.Holder()
	require.True(t, ok)
	require.Equal(t, holderID(next.Token()), holderOf)
	return h, next, attempts, shown
}

// handedTo has lock, another Client's wait, queue behind h (held on every
// node first: TryLock returns at a majority), then sets released and
// releases h; it returns what lock got, once every node's grants are in.
func handedTo(t *testing.T, h *Lock, released *atomic.Bool, lock func(context.Context) (*Lock, error)) *Lock {
	synctest.Wait()
	got := make(chan *Lock)
	go func() {
		l, err := lock(t.Context())
		assert.NoError(t, err)
		got <- l
	}()
	time.Sleep(time.Second) // virtual: the waiter queued and looked
	synctest.Wait()
	released.Store(true)
	require.NoError(t, h.Unlock(t.Context()))
	l := <-got
	require.NotNil(t, l)
	synctest.Wait()
	return l
}

// attemptsAfter counts the acquire attempts the fakes are sent once the
// returned flag is set; called before any Client uses the fakes.
func attemptsAfter(fakes []*fakeNode) (from *atomic.Bool, n *atomic.Int32) {
	from, n = new(atomic.Bool), new(atomic.Int32)
	for _, f := range fakes {
		f.hold = func(o *wire.Op) {
			if from.Load() && wire.IsAcquire(o.Kind) {
				n.Add(1)
			}
		}
	}
	return from, n
}

// TestMetadataLockGrantedByRelease: a Lock with metadata waiting behind
// another Client's holder is granted the key by the release, its
// metadata with it, without an attempt of its own: Inspect shows it as
// the holder with its metadata. Fenced, it holds with the releaser's
// proposal, above the holder's token.
func TestMetadataLockGrantedByRelease(t *testing.T) {
	for _, fencing := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fenced"}[fencing], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var opts []Option
				if fencing {
					opts = append(opts, WithFencing())
				}
				h, l, attempts, meta := metadataHandOff(t, newFakeNodes(5), opts...)
				require.Zero(t, attempts, "the waiter attempted: the release did not grant it")
				require.Contains(t, l.Token(), map[bool]string{false: ".wim", true: ".wifm"}[fencing])
				if fencing {
					require.Greater(t, l.Fence(), h.Fence())
				}
				require.Equal(t, "host=b", meta)
				require.NoError(t, l.Unlock(t.Context()))
			})
		})
	}
}

// olderReleaseBroken: a release by an older Client, whose script grants a
// ".wi" place the key by its ID alone, grants a waiter with metadata
// without it; the waiter must not hold by such grants (its notices carry
// no 'v'), but attempt, and hold with its metadata. It returns what went
// wrong ("" for nothing).
func olderReleaseBroken(t *testing.T) (broken string) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		older := scriptMutant("an older Client's release", (&wire.Op{Kind: wire.OpRelease}).Source(),
			"grant(ARGV[3], q, l, h, left, nil, fence, meta)", "grant(ARGV[3], q, l, h, left, nil, fence, nil)")
		for _, f := range fakes {
			older.node(f)
		}
		_, l, attempts, meta := metadataHandOff(t, fakes)
		switch {
		case meta != "host=b":
			broken = fmt.Sprintf("the waiter holds with metadata %q on the nodes, not host=b", meta)
		case attempts == 0:
			broken = "the waiter held by grants without its metadata"
		}
		_ = l.Unlock(t.Context())
	})
	return broken
}

// TestMetadataGrantByOlderReleaseAttempts: see olderReleaseBroken.
func TestMetadataGrantByOlderReleaseAttempts(t *testing.T) {
	if b := olderReleaseBroken(t); b != "" {
		t.Fatal(b)
	}
}

func TestMetadataGrantMutantsCaught(t *testing.T) {
	requireCaught(t, []scheduledMutant{
		{"a waiter with metadata counts a grant that did not set it", mutGrantWithoutMetadata, olderReleaseBroken},
	})
}

// TestSemaphoreWaiterWithMetadataGranted: a semaphore's waiter with
// metadata is granted the freed slot by its release, its metadata beside
// its place's ID on every node, without an attempt of its own.
func TestSemaphoreWaiterWithMetadataGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		released, attempts := attemptsAfter(fakes)
		holderC, waiterC := newTestClient(t, fakes), newTestClient(t, fakes)
		held, got := poolWaiters(t, holderC, nil, WithMetadata("host=b"), waiterC)
		released.Store(true)
		require.NoError(t, held[slotKey("pool", 0)].Unlock(t.Context()))
		l := <-got[0]
		require.NotNil(t, l)
		synctest.Wait() // every node's grant is in
		require.Zero(t, attempts.Load(), "the waiter attempted: the release did not grant it")
		require.Contains(t, l.Token(), ".wim")
		rkey := holderC.target(l.Key()).rkey
		for _, f := range fakes {
			ok, what := holds(f, rkey, l.Token(), "host=b", false)
			require.True(t, ok, "%s holds %s", f.Name(), what)
		}
		require.NoError(t, l.Unlock(t.Context()))
		require.NoError(t, held[slotKey("pool", 1)].Unlock(t.Context()))
	})
}

// TestSetWithMetadataGranted: a set with metadata waiting behind a
// one-key holder of one of its keys is granted both keys by that
// release, its metadata beside its place's ID on every node, without an
// attempt of its own.
func TestSetWithMetadataGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		released, attempts := attemptsAfter(fakes)
		holderC, waiterC := newTestClient(t, fakes), newTestClient(t, fakes)
		h, err := holderC.TryLock(t.Context(), "a")
		require.NoError(t, err)
		m, err := waiterC.MultiLock([]string{"a", "b"}, WithMetadata("host=s"))
		require.NoError(t, err)
		l := handedTo(t, h, released, m.Lock)
		require.Zero(t, attempts.Load(), "the set attempted: the release did not grant it")
		require.Contains(t, l.Token(), ".wism")
		for _, k := range []string{"a", "b"} {
			for _, f := range fakes {
				ok, what := holds(f, holderC.redisKey(k), l.Token(), "host=s", false)
				require.True(t, ok, "%s holds %s: %s", f.Name(), k, what)
			}
		}
		require.NoError(t, l.Unlock(t.Context()))
	})
}
