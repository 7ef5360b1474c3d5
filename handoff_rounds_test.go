package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSplitVoteHandsOverInRounds: three Lock calls on a free key split
// the vote (each granted on one node of three), all are refused, take
// their grants back and queue; two of the take-backs are slow, so every
// look at the queue finds the key held. Nobody holds it, and no release
// will name anyone: once the take-backs land, the first waiter must try
// again within a few rounds (the split vote's bound), not after its
// strategy's delay (10–200 ms by default), which its look, finding the
// grants being taken back, used to put in place (found by the simulator,
// seed 91).
func TestSplitVoteHandsOverInRounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const d = 200 * time.Microsecond // each node's delay: a round
		fakes := newFakeNodes(3)
		tokens := []string{"A", "B", "C"}
		g := gates{}
		for i := range fakes {
			fakes[i].delay = d
			for j, token := range tokens {
				if i != j { // node i grants tokens[i] first
					g[gateKey{i, wire.OpAcquire, token}] = make(chan struct{})
				}
			}
		}
		g.install(fakes)
		start := time.Now()
		for i, token := range []string{"", "B", "C"} {
			acquires := fakes[i].hold
			fakes[i].hold = func(o *wire.Op) {
				acquires(o)
				if o.Kind == wire.OpRelease && o.Token == token {
					time.Sleep(3 * d / 2) // taken back after the looks
				}
			}
		}
		got := make(chan time.Duration, len(tokens))
		var wg sync.WaitGroup
		for _, token := range tokens {
			c := newTestClient(t, fakes)
			wg.Go(func() {
				l, err := c.Lock(t.Context(), "k", WithToken(token))
				if err != nil {
					t.Error(err)
					return
				}
				got <- time.Since(start)
				if err := l.Unlock(context.Background()); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(2 * d) // each granted on its own node
		for _, ch := range g {
			close(ch)
		}
		wg.Wait()
		close(got)
		first := <-got
		// Refused at 4d, the looks at the queue run at 5d, the grants
		// are gone at 5.5d: the first waiter looks again within two
		// rounds of its attempt (8d), at 6d or later, and holds the lock
		// a round or two after that. Its strategy's delay is 10 ms at the
		// least.
		require.Less(t, first, 5*time.Millisecond, "the first waiter held the lock %v after the start", first)
	})
}

// TestNoticesKeptThroughARelease: a waiter is woken once a majority of
// nodes announce a release naming it, however many releases this Client
// heard of before. Another release's notices arrive between each one's
// (two releases in flight, as on a hot key). The record of releases is
// bounded: it was cleared whole once it held more than 64 tokens, and a
// release whose notices straddled the clearing lost its first notice,
// never reached a majority, and left its waiter asleep until its retry
// timer (up to 200 ms with the default strategy: stalls of 130–200 ms with
// four Clients locking one key with no work). The 33rd release here was
// the one.
func TestNoticesKeptThroughARelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(5))
		const rkey = "redlock:{k}"
		w := c.hand.join(c.target("k"), &lockConfig{})
		defer c.hand.leave(w, nil)
		notice := func(token, head string) { c.hand.notice(0, rkey+"\x00"+token+"\x00"+head) }
		for i := range 200 {
			ours, theirs := fmt.Sprintf("ours%d", i), fmt.Sprintf("theirs%d", i)
			notice(ours, w.ID)
			notice(theirs, "someone.1")
			notice(ours, w.ID)
			notice(ours, w.ID)
			select {
			case <-w.wake:
			default:
				t.Fatalf("release %d: three of five nodes named the waiter, and it was not woken", i+1)
			}
		}
	})
}

// TestLookAgainWhileReleased: a waiter whose look finds a release under way
// (first with the key free on some nodes, the key still held on the rest)
// looks again a round trip later, not after its strategy's delay (10–200
// ms by default): the release's notices may never make a majority for it
// (nodes whose first waiter was another, at the release). Here no notice
// reaches anyone; the holder's release runs on nodes 0 and 1, and on the
// others only once the waiter's look has seen that (their answers come a
// millisecond later: a look ends once decided, and counts the nodes that
// answered by then). The look after that finds the key granted to the
// waiter's place on every node, and the waiter waits grantsHeldWait for
// the grants' notices (awaitGrants), lost here, before it attempts.
func TestLookAgainWhileReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		// The hooks are set before the nodes are used, and armed once the
		// waiter sleeps: the looks counted are those after the release.
		var armed atomic.Bool
		gate, looks, opened, again := make(chan struct{}), atomic.Int32{}, atomic.Int64{}, atomic.Int64{}
		for i, f := range fakes {
			f.noNotices = true
			f.ran = func(o *wire.Op) {
				if !armed.Load() || o.Kind != wire.OpQueue {
					return
				}
				switch n := looks.Add(1); {
				case n == int32(len(fakes)):
					opened.Store(time.Now().UnixNano()) // the look saw the release half done
					close(gate)
				case n > int32(len(fakes)):
					again.CompareAndSwap(0, time.Now().UnixNano()) // the next look
				}
			}
			if i < 2 {
				continue
			}
			f.hold = func(o *wire.Op) {
				switch {
				case !armed.Load():
				case o.Kind == wire.OpRelease:
					<-gate
				case o.Kind == wire.OpQueue: // the nodes with the key free answer first
					time.Sleep(time.Millisecond)
				}
			}
		}
		l, err := newTestClient(t, fakes).TryLock(t.Context(), "k")
		require.NoError(t, err)
		synctest.Wait()
		got := make(chan time.Time, 1)
		go func() {
			w, err := newTestClient(t, fakes).Lock(t.Context(), "k")
			assert.NoError(t, err)
			got <- time.Now()
			assert.NoError(t, w.Unlock(t.Context()))
		}()
		synctest.Wait() // refused, queued, asleep
		armed.Store(true)
		go func() { assert.NoError(t, l.Unlock(t.Context())) }()
		took := <-got
		require.NotZero(t, again.Load(), "no look after the release was seen")
		require.LessOrEqual(t, time.Duration(again.Load()-opened.Load()), 4*time.Millisecond, "the waiter waited for its strategy, not a round trip")
		require.LessOrEqual(t, took.Sub(time.Unix(0, opened.Load())), 4*time.Millisecond+grantsHeldWait, "the waiter waited for its strategy, not for its grants' notices")
		synctest.Wait()
	})
}

// TestWinnerLeavesRefusingNodesInBackground: a queued Lock that wins
// returns as soon as it holds the lock. Its place on a node that refused
// it (the key held by another there) is taken out afterwards, and the
// call does not wait for that node; before, it waited a round trip to
// the nodes a hand-off had reached last.
func TestWinnerLeavesRefusingNodesInBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		var blockLeaves atomic.Bool
		leave := make(chan struct{})
		var open sync.Once
		defer open.Do(func() { close(leave) }) // before the Clients close, whatever happens
		fakes[4].hold = func(o *wire.Op) {
			if o.Kind == wire.OpQueue && o.Quiet && blockLeaves.Load() {
				<-leave
			}
		}
		holder, waiter := newTestClient(t, fakes), newTestClient(t, fakes)
		l, err := holder.TryLock(t.Context(), "k")
		require.NoError(t, err)
		got := make(chan error)
		go func() {
			// A token of its own: a release does not grant it the key
			// (see grantable), it attempts. (A granted one's place goes
			// with its Unlock: TestGrantedPlaceGoesWithUnlock.)
			_, err := waiter.Lock(t.Context(), "k", waitHour, WithToken("waiter-token"))
			got <- err
		}()
		synctest.Wait() // refused once, and queued on every node
		rkey := waiter.redisKey("k")
		fakes[4].set(rkey, "other", time.Minute) // it refuses the waiter
		blockLeaves.Store(true)
		_ = l.Unlock(t.Context()) // released on 4 of 5: the notices wake the waiter
		require.NoError(t, <-got)
		queued := func() any { return fakes[4].mem.Do("ZCOUNT", rkey+":queue", "-inf", "+inf") }
		require.EqualValues(t, 1, queued(), "the leave has not run yet")
		open.Do(func() { close(leave) })
		synctest.Wait()
		require.EqualValues(t, 0, queued(), "the winner's place is still in the queue of the node that refused it")
	})
}
