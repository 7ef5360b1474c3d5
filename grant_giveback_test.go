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

// TestGivenBackGrantsCountNoMore: a waiter w granted the key on nodes 0
// and 1 by a release that granted another waiter's place p on nodes 2-4,
// where q waits first, gives its grants back (grantsStuck), and nodes 0
// and 1 grant the key to r, now first there. Then p's release on node 2
// grants w the key there. w must not hold by nodes 0 and 1 with node 2:
// they are r's. (Under the mutant whose given-back grants still count, w
// holds with its key on node 2 only.)
func TestGivenBackGrantsCountNoMore(t *testing.T) {
	if broke := givenBackCounted(t); broke != "" {
		t.Fatal(broke)
	}
}

// TestReaderLetInAfterGiveBack: a reader let in on nodes 0 and 1 gives
// its let-ins back; let-ins that name its looks before then do not
// count, and those that name a later look do: let in so on a majority, it
// holds. Before, a reader that gave back was woken to attempt by later
// let-ins instead, and its attempt was refused where a writer had come
// to wait ahead of it, while its let-ins kept that writer out: no one
// held until they lapsed (integration's TestRWMutexGrantsSplitBetweenWaiters,
// once in about 100 runs beside a CPU hog).
func TestReaderLetInAfterGiveBack(t *testing.T) {
	if broke := readerGiveBackBroken(t); broke != "" {
		t.Fatal(broke)
	}
}

// TestReaderLetInWaitsForGiveBack: a reader's let-ins on a node whose
// release of the let-ins it gave back has not answered do not count, even
// where they name a later look: that look may have overtaken the release
// (a new connection beside a dead one), which would then take the let-in
// away. Once the release has answered, they count.
func TestReaderLetInWaitsForGiveBack(t *testing.T) {
	if broke := readerBackingBroken(t); broke != "" {
		t.Fatal(broke)
	}
}

func TestGiveBackMutantCaught(t *testing.T) {
	requireCaught(t, []scheduledMutant{
		{"grants given back still count", mutGiveBackCounts, givenBackCounted},
		{"a reader's let-ins given back still count", mutGiveBackCounts, readerGiveBackBroken},
		{"a reader's let-ins count before its give-back answered", mutBackingIgnored, readerBackingBroken},
	})
}

// readerBackingBroken runs TestReaderLetInWaitsForGiveBack's schedule and
// returns what broke ("" if nothing did).
func readerBackingBroken(t *testing.T) (broke string) {
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w := letInWaiter(t)
		letIn := noticesTo(c, tg, w)
		letIn(c.hand.numberLook(w, time.Now()), 0, 1)
		gate := make(chan struct{})
		for _, n := range c.nodes[:2] {
			n.(*fakeNode).setGate(gate) // the give-back's releases wait
		}
		require.True(t, c.hand.giveBack(w))
		c.hand.giveBackLetIns(w, 0b11)
		after := c.hand.numberLook(w, time.Now())
		letIn(after, 0, 1, 2)
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broke = "held by let-ins from nodes whose give-back had not answered"
			close(gate)
			_ = l.Unlock(context.Background())
			return
		}
		close(gate)
		synctest.Wait()
		letIn(after, 0, 1)
		l := c.takeLetIn(t.Context(), tg, lc, w, 1)
		if l == nil {
			broke = "let in on a majority after its give-back answered, and not held"
			return
		}
		_ = l.Unlock(context.Background()) // (the nodes never let it in: the notices are the test's)
	})
	return broke
}

// readerGiveBackBroken runs TestReaderLetInAfterGiveBack's schedule and
// returns what broke ("" if nothing did).
func readerGiveBackBroken(t *testing.T) (broke string) {
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w := letInWaiter(t)
		letIn := noticesTo(c, tg, w)
		before := c.hand.numberLook(w, time.Now())
		letIn(before, 0, 1)
		require.True(t, c.hand.giveBack(w), "let in on a minority: given back")
		letIn(before, 2, 3) // (notices that were on their way)
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broke = "held by let-ins that name a look before it gave back"
			_ = l.Unlock(context.Background())
			return
		}
		after := c.hand.numberLook(w, time.Now())
		letIn(after, 0, 1, 2)
		l := c.takeLetIn(t.Context(), tg, lc, w, 1)
		if l == nil {
			broke = "let in on a majority by a look after it gave back, and not held"
			return
		}
		_ = l.Unlock(context.Background()) // (the nodes never let it in: the notices are the test's)
	})
	return broke
}

// givenBackCounted runs TestGivenBackGrantsCountNoMore's schedule and
// returns what broke: "" if w held on a majority of nodes, or did not
// hold.
func givenBackCounted(t *testing.T) (broke string) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		ctx := t.Context()
		l, err := newTestClient(t, fakes).TryLock(ctx, "k")
		require.NoError(t, err)
		synctest.Wait() // held on every node
		c := newTestClient(t, fakes)
		rkey := c.redisKey("k")
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		got := make(chan *Lock, 1)
		go func() {
			w, _ := c.Lock(lctx, "k", waitHour)
			got <- w
		}()
		synctest.Wait() // refused, and queued on every node
		w := fakes[0].mem.Do("ZRANGE", rkey+":queue", "0", "-1").([]any)[0].(string)
		place := func(id string, ticket int64) *wire.Place {
			return &wire.Place{ID: id, Ticket: ticket, Lease: time.Minute}
		}
		p, q, r := "PPPPPPPPPPPPP.wi1", "QQQQQQQQQQQQQ.wi1", "RRRRRRRRRRRRR.wi1"
		for _, f := range fakes[2:] {
			f.enqueue(rkey, place(p, 1))
			f.enqueue(rkey, place(q, 2))
		}
		require.NoError(t, l.Unlock(ctx)) // grants w on 0 and 1, p on 2-4
		synctest.Wait()
		for _, f := range fakes[:2] {
			require.Equal(t, w, holderOf(f, rkey), "granted to w")
			f.enqueue(rkey, place(r, 3))
		}
		time.Sleep(50 * time.Millisecond) // w looks, and gives its grants back
		for _, f := range fakes[:2] {
			require.Equal(t, r, holderOf(f, rkey), "w gave its grant back, and r was granted it")
		}
		fakes[2].enqueue(rkey, place(q, 0)) // q leaves node 2: w is first there
		o := wire.NewOp(wire.OpRelease, rkey, p, "", 0)
		o.Wake = c.hand.wakeArg
		o.Encode()
		require.Equal(t, []any{int64(1), w}, fakes[2].mem.Do(o.EvalArgs(2)...), "p's release grants w node 2")
		time.Sleep(50 * time.Millisecond)
		select {
		case held := <-got:
			if held == nil {
				return
			}
			n := 0
			for _, f := range fakes {
				if holderOf(f, rkey) == held.Token() {
					n++
				}
			}
			if n < c.quorum() {
				broke = fmt.Sprintf("w held with its key on %d of 5 nodes", n)
			}
		default: // w waits: r and p hold
		}
	})
	return broke
}

// holderOf returns the token or place ID that holds key on f ("": none).
func holderOf(f *fakeNode, key string) string {
	v, _ := f.value(key)
	h, _, _ := strings.Cut(v, "\x00")
	return h
}

// noticesTo returns a function that hands the waiter w the let-in
// notices of nodes, naming its look seq.
func noticesTo(c *Client, tg target, w *waiter) func(seq int64, nodes ...int) {
	return func(seq int64, nodes ...int) {
		for _, i := range nodes {
			c.hand.letInNotice(i, tg.rkey, w.ID, strconv.FormatInt(seq, 10))
		}
	}
}
