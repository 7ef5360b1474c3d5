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

// cutNode is a fake node that one Client reaches through a link the test
// can cut: while cut, that Client's calls fail at once, as a dead process
// would stop talking; other Clients reach the node as ever.
type cutNode struct {
	*fakeNode
	cut *atomic.Bool
}

func (n cutNode) Start(c nodeio.Call) {
	if n.cut.Load() {
		go c.To.Deliver(c.Index, wire.Result{Err: errFakeDown})
		return
	}
	n.fakeNode.Start(c)
}

func (n cutNode) StartAll(calls []nodeio.Call) {
	if !n.cut.Load() {
		n.fakeNode.StartAll(calls)
		return
	}
	for _, c := range calls {
		n.Start(c)
	}
}

// newCutClient is newTestClient through links that cut cuts.
func newCutClient(t *testing.T, fakes []*fakeNode, cut *atomic.Bool, opts ...Option) *Client {
	t.Helper()
	nodes := make([]node, len(fakes))
	for i, f := range fakes {
		nodes[i] = cutNode{f, cut}
	}
	c, err := newClient(nodes, append([]Option{WithAnyNodeCount(), WithNodeTimeout(5 * time.Second)}, opts...))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func testElection(t *testing.T, c *Client, opts ...Option) *Election {
	t.Helper()
	e, err := c.Election("e", opts...)
	require.NoError(t, err)
	return e
}

// TestElectionResignHandsOver: candidates lead in the order they
// campaigned, each in a larger term, and a resignation hands over at the
// same instant of virtual time: the next candidate is woken by the
// release, not by a timer. Leader reads each leader back.
func TestElectionResignHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		e1 := testElection(t, newTestClient(t, fakes))
		e2 := testElection(t, newTestClient(t, fakes))
		ctx := t.Context()

		_, err := e1.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader)
		first, err := e1.Campaign(ctx, "a")
		require.NoError(t, err)
		got, err := e2.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "a", Term: first.Term(), seq: 1}, got)

		type campaign struct {
			ld  *Leadership
			err error
		}
		results := make(chan campaign, 2)
		for _, v := range []string{"b", "c"} {
			e := e1
			if v == "b" {
				e = e2
			}
			go func() {
				ld, err := e.Campaign(ctx, v)
				results <- campaign{ld, err}
			}()
			synctest.Wait()
			time.Sleep(time.Microsecond) // queued in this order: tickets are µs
		}
		prev := first
		for _, want := range []string{"b", "c"} {
			start := time.Now()
			require.NoError(t, prev.Resign(ctx))
			r := <-results
			require.NoError(t, r.err)
			require.Equal(t, want, r.ld.Value())
			require.Zero(t, time.Since(start), "the resignation did not wake %s", want)
			require.Greater(t, r.ld.Term(), prev.Term())
			require.ErrorIs(t, prev.Lock().Err(), ErrReleased)
			got, err := e1.Leader(ctx)
			require.NoError(t, err)
			require.Equal(t, Leader{Value: want, Term: r.ld.Term(), seq: 1}, got)
			prev = r.ld
		}
		require.NoError(t, prev.Resign(ctx))
	})
}

// TestElectionDeadLeader: a leader that stops talking to the nodes loses
// its leadership (Done, with TTL/10 of validity left), and the next
// candidate leads once the leader's keys have run out on the nodes: not
// before its validity ended, and within a millisecond of the keys' TTL.
func TestElectionDeadLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		var cut atomic.Bool
		const ttl = time.Second
		leader := testElection(t, newCutClient(t, fakes, &cut), WithTTL(ttl))
		standby := testElection(t, newTestClient(t, fakes), WithTTL(ttl))
		ctx := t.Context()

		ld, err := leader.Campaign(ctx, "old")
		require.NoError(t, err)
		next := make(chan *Leadership)
		go func() {
			ld, err := standby.Campaign(ctx, "new")
			require.NoError(t, err)
			next <- ld
		}()
		time.Sleep(5 * ttl) // extended all along
		require.NoError(t, ld.Lock().Err())
		lastExtension := time.Now().Add(-ttl / 3)
		for time.Since(lastExtension) >= ttl/3 { // land right after an extension
			time.Sleep(time.Millisecond)
			lastExtension = time.Now().Add(ld.Lock().Validity() - ttl + drift(ttl, defaultDriftFactor))
		}
		validUntil := time.Now().Add(ld.Lock().Validity())
		cut.Store(true)
		<-ld.Lock().Done()
		require.ErrorIs(t, ld.Lock().Err(), ErrExpired)
		require.GreaterOrEqual(t, time.Until(validUntil), ttl/10-time.Millisecond, "Done was not closed with TTL/10 left")
		nl := <-next
		took := time.Now()
		require.False(t, took.Before(validUntil), "the next leader came before the old one's validity ended")
		require.LessOrEqual(t, took.Sub(lastExtension), ttl+2*time.Millisecond, "the next leader came long after the keys ran out")
		require.Greater(t, nl.Term(), ld.Term())
	})
}

// TestElectionObserve: an observer sees the current leader, then each new
// leader and each proclaimed value, in term order; with every notice lost,
// it still sees them, by its slow poll.
func TestElectionObserve(t *testing.T) {
	for _, notices := range []bool{true, false} {
		t.Run(map[bool]string{true: "notices", false: "no notices"}[notices], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				for _, f := range fakes {
					f.noNotices = !notices
				}
				e := testElection(t, newTestClient(t, fakes))
				watcher := testElection(t, newTestClient(t, fakes))
				ctx, cancel := context.WithCancel(t.Context())
				a, err := e.Campaign(ctx, "a")
				require.NoError(t, err)
				seen := watcher.Observe(ctx)
				expect := func(want Leader) {
					t.Helper()
					start := time.Now()
					select {
					case got := <-seen:
						require.Equal(t, want, got)
					case <-time.After(time.Minute):
						t.Fatalf("not seen: %+v", want)
					}
					if notices {
						require.Zero(t, time.Since(start), "seen by a poll, not by the notice")
					}
				}
				expect(Leader{Value: "a", Term: a.Term(), seq: 1})
				require.NoError(t, a.Proclaim(ctx, "a2"))
				require.Equal(t, "a2", a.Value())
				expect(Leader{Value: "a2", Term: a.Term(), seq: 2})
				next := make(chan *Leadership)
				go func() {
					ld, err := e.Campaign(ctx, "b")
					require.NoError(t, err)
					next <- ld
				}()
				synctest.Wait()
				require.NoError(t, a.Resign(ctx))
				b := <-next
				expect(Leader{Value: "b", Term: b.Term(), seq: 1})
				cancel()
				_, open := <-seen
				require.False(t, open, "the channel stays open after ctx ended")
			})
		})
	}
}

// TestElectionLeaderUndecided: Leader tells "no leader" from "cannot
// tell", and returns as soon as a majority agrees, without waiting for a
// node that hangs.
func TestElectionLeaderUndecided(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		e := testElection(t, newTestClient(t, fakes))
		ctx := t.Context()
		ld, err := e.Campaign(ctx, "v")
		require.NoError(t, err)
		synctest.Wait() // the last node's grant and announcement too

		gate := make(chan struct{})
		fakes[2].setGate(gate)
		start := time.Now()
		got, err := e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, ld.Term(), got.Term)
		require.Zero(t, time.Since(start), "Leader waited for the hung node")

		fakes[1].setErr(errFakeDown)
		_, err = e.Leader(ctx)
		var qerr *QuorumError
		require.ErrorAs(t, err, &qerr)
		require.ErrorIs(t, err, ErrNotObtained)
		require.NotErrorIs(t, err, ErrNoLeader)
		close(gate)
		fakes[1].setErr(nil)

		// A winner that has not announced its term is no leader yet.
		for _, f := range fakes {
			f.set(e.rkey, "tok\x00"+encodeLeader(0, 0, "v"), time.Minute)
		}
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader)
		require.Contains(t, err.Error(), "not announced")

		// Announced on a majority (the holder's announcements are), and
		// any majority of answers finds the latest.
		for _, i := range []int{0, 1} {
			fakes[i].set(e.rkey, "tok\x00"+encodeLeader(7, 1, "w"), time.Minute)
		}
		got, err = e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "w", Term: 7, seq: 1}, got)
		for _, i := range []int{1, 2} {
			fakes[i].set(e.rkey, "tok\x00"+encodeLeader(7, 2, "x"), time.Minute)
		}
		got, err = e.Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "x", Term: 7, seq: 2}, got)

		// One node holds a leader's key, one none, one hangs: the hung one
		// may hold it too, so nobody can tell. With no key on two nodes,
		// there is no leader, whatever the hung one holds.
		fakes[1].del(e.rkey)
		hung := make(chan struct{})
		fakes[2].setGate(hung)
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, ErrNotObtained)
		require.NotErrorIs(t, err, ErrNoLeader)
		fakes[0].del(e.rkey)
		start = time.Now()
		_, err = e.Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader)
		require.Zero(t, time.Since(start), "Leader waited for the hung node")
		close(hung)
	})
}
