package redlock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/wire"
)

// TestFencedGrantScripts holds the scripts of a fenced waiter granted the
// key by a release (fencedGrant) to their answers on a real redis-server:
// a release that proposes a fencing token above the key's fence counter
// grants the first waiter's fenced place (".wif") the key, raises the
// counter to the proposal and names it in the notice after the look's
// number and an 'f'; a proposal at or below the counter, or none (an
// unfenced holder's release), grants the key without a token, the counter
// left alone, and the waiter's fenced attempt takes the key from its
// place and gets a token above the counter.
func TestFencedGrantScripts(t *testing.T) {
	rc, run := scriptNode(t)
	ctx := t.Context()
	const lease, ttl = time.Minute, time.Minute
	key := "redlock:{fenced}"
	look := func(id string, ticket, seq int64) {
		o := wire.NewOp(wire.OpQueue, key, "", "", 0)
		o.Place, o.Wake, o.Seq = &wire.Place{ID: id, Ticket: ticket, Lease: lease}, "redlock:wake:", seq
		run(o)
	}
	release := func(token string, proposal int64) any {
		o := wire.NewOp(wire.OpRelease, key, token, "", 0)
		o.Wake, o.Fence = "redlock:wake:", proposal
		return run(o)
	}
	counter := func() int64 { return int64(rc.ZScore(ctx, key+":fence", "c").Val()) }
	notice := noticesOn(t, rc, "redlock:wake:c")
	const p = 1000*wire.FenceModulus + wire.FenceModulus - 1 // a proposal

	o := wire.NewOp(wire.OpAcquire, key, "htok", "htok", ttl)
	require.Equal(t, int64(1), run(o))
	look("c.wif1", 100, 7)
	look("c.wif2", 200, 3)
	require.Equal(t, []any{int64(1), "c.wif1"}, release("htok", p))
	require.Equal(t, "c.wif1\x00\x02", rc.Get(ctx, key).Val(), "granted to the place's ID, marked: another waits")
	require.Equal(t, int64(p), counter(), "the counter is the proposal")
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"7f"+strconv.Itoa(p)+"\x00c.wif1", notice(), "the notice names the token")

	// A proposal at or below the counter: granted without a token.
	require.Equal(t, []any{int64(1), "c.wif2"}, release("c.wif1", p))
	require.Equal(t, "c.wif2", rc.Get(ctx, key).Val())
	require.Equal(t, int64(p), counter(), "the counter stays")
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"3\x00c.wif2", notice(), "no token named")

	// The waiter's fenced attempt takes the key from its place, with a
	// token above the counter (its proposal, below it, is not taken).
	a := wire.NewOp(wire.OpAcquireFenced, key, "t2", "t2", ttl)
	a.Place, a.Fence = &wire.Place{ID: "c.wif2", Ticket: 200, Lease: lease}, p-wire.FenceModulus
	got := run(a).([]any)
	require.Equal(t, int64(1), got[0], "the attempt takes the key granted to its place")
	require.Greater(t, got[1], int64(p))
	require.Equal(t, "t2", rc.Get(ctx, key).Val())
	require.Equal(t, got[1], counter())

	// An unfenced holder's release (no proposal): granted without a token.
	look("c.wif3", 300, 2)
	require.Equal(t, []any{int64(1), "c.wif3"}, release("t2", 0))
	require.Equal(t, "c.wif3", rc.Get(ctx, key).Val())
	require.Equal(t, got[1], counter())
	require.Equal(t, "redlock:wake:c "+key+"\x00"+wire.LetIn+"2\x00c.wif3", notice())
}

// fencedGrantWaiter is grantWaiter's fenced Lock: its place is ".wif".
func fencedGrantWaiter(t *testing.T) (*Client, target, *lockConfig, *waiter, string) {
	return waiterWith(t, &lockConfig{ttl: time.Minute, fencing: true})
}

// fencedGrantsMixedBroken: a fenced waiter is granted the key by node 4
// without a token, then by nodes 0 and 1 with token a and by nodes 2 and
// 3 with token b (another release's, say). No majority shows one token, so no
// token is the acquisition's (docs/fencing.md, claim 3): it must not
// hold, and must be woken to attempt (no node is left to grant it). Then
// a fresh waiter granted by nodes 0, 1 and 2 with a and by 3 with b holds
// with a.
func fencedGrantsMixedBroken(t *testing.T) string {
	const a, b = 64*1000 + 63, 64*2000 + 63
	var broken string
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w, n := fencedGrantWaiter(t)
		grants := map[int]string{4: "", 0: "f" + strconv.Itoa(a), 1: "f" + strconv.Itoa(a), 2: "f" + strconv.Itoa(b), 3: "f" + strconv.Itoa(b)}
		for _, i := range []int{4, 0, 1, 2, 3} { // the last one counts, and leaves no majority possible
			c.hand.letInNotice(i, tg.rkey, w.ID, n+grants[i])
		}
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broken = fmt.Sprintf("held with token %d by grants that name two tokens and none", l.Fence())
			_ = l.Unlock(context.Background())
			return
		}
		select {
		case <-w.wake:
		default:
			broken = "granted by every node with no token on a majority, and not woken to attempt"
			return
		}
		c, tg, lc, w, n = fencedGrantWaiter(t)
		for i, f := range []int{a, a, b, a} {
			c.hand.letInNotice(i, tg.rkey, w.ID, n+"f"+strconv.Itoa(f))
		}
		l := c.takeLetIn(t.Context(), tg, lc, w, 1)
		if l == nil || l.Fence() != a {
			broken = "not held with the token a majority shows"
		}
		if l != nil {
			_ = l.Unlock(context.Background())
		}
	})
	return broken
}

func TestFencedGrantsHoldWithOneToken(t *testing.T) {
	if b := fencedGrantsMixedBroken(t); b != "" {
		t.Fatal(b)
	}
}

func TestFencedGrantMutantsCaught(t *testing.T) {
	requireCaught(t, []scheduledMutant{
		{"a fenced waiter's grants count whatever tokens they name", mutFencesMixed, fencedGrantsMixedBroken},
	})
}

// fencedHandOffBroken: a fenced holder whose clock runs ahead (its
// proposals far above the others') hands the key to a fenced waiter of
// another Client by its release, so the waiter's token is the release's
// proposal. Then a third Client, its clock not ahead, locks the key: its
// token must be above the waiter's, as it is only where the release
// raised the counters to the token it handed out. It returns what broke,
// nil if nothing did; variant, if not nil, runs on every node.
func fencedHandOffBroken(t *testing.T, variant func(*wire.Op) string) (broke error) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		for _, f := range fakes {
			f.variant = variant
		}
		ahead := newTestClient(t, fakes, WithFencing())
		ahead.proposed.Store(ahead.propose() + 1e6*wire.FenceModulus)
		waiter := newTestClient(t, fakes, WithFencing())
		late := newTestClient(t, fakes, WithFencing())
		ctx := t.Context()
		h, err := ahead.Lock(ctx, "k")
		if err != nil {
			broke = err
			return
		}
		got := make(chan *Lock, 1)
		go func() {
			l, err := waiter.Lock(ctx, "k")
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(time.Second) // the waiter queued, and looked since its subscriptions
		if err := h.Unlock(ctx); err != nil {
			broke = err
			return
		}
		w := <-got
		if w == nil {
			return
		}
		if !strings.Contains(w.Token(), ".wif") || w.Fence() <= h.Fence() {
			broke = fmt.Errorf("the waiter holds with %q, token %d after %d: want a fenced grant by the release, above", w.Token(), w.Fence(), h.Fence())
		}
		if err := w.Unlock(ctx); err != nil {
			broke = err
			return
		}
		l, err := late.TryLock(ctx, "k")
		switch {
		case err != nil:
			broke = err
		case l.Fence() <= w.Fence():
			broke = fmt.Errorf("token %d after the granted waiter's %d", l.Fence(), w.Fence())
		default:
			_ = l.Unlock(ctx)
		}
	})
	return broke
}

// grantLeavesCounter is the release script that grants a fenced waiter the
// releaser's proposal and leaves the counter below it.
var grantLeavesCounter = scriptMutant("grantLeavesCounter", (&wire.Op{Kind: wire.OpRelease}).Source(), "setCounter(KEYS[1] .. ':fence', p)", "")

// TestFencedHandOffRaisesCounters: the token a release grants is the
// counter from then on; the schedule breaks where it is not.
func TestFencedHandOffRaisesCounters(t *testing.T) {
	if err := fencedHandOffBroken(t, nil); err != nil {
		t.Fatal(err)
	}
	mutant := &fakeNode{}
	grantLeavesCounter.applyNode(mutant)
	if err := fencedHandOffBroken(t, mutant.variant); err == nil {
		t.Fatal("the grant that leaves the counter below its token broke nothing")
	} else {
		t.Log("without the counter raised:", err)
	}
}
