package redlock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countersAhead sets the election's fence counter on each of fakes above
// any proposal a Client makes (2^52; proposals are the time in 100 µs
// steps times 64, about 2^50 today): those nodes take no proposal, and
// hand out more.
func countersAhead(e *Election, fakes ...*fakeNode) {
	for _, f := range fakes {
		f.mem.Do("SET", wire.FenceKey(e.rkey), strconv.FormatInt(1<<52, 10))
	}
}

// TestCampaignAnnouncedByGrant: a campaign whose proposal a majority took
// leads as soon as it holds the lock: the grant announced it, and the
// proclamation that confirms it is not waited for. While every
// proclamation is held back, Campaign returns, and Leader (another
// Client's) reads the leader with its term and value.
func TestCampaignAnnouncedByGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		release := make(chan struct{})
		var proclaims atomic.Int32
		for _, f := range fakes {
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpProclaim {
					proclaims.Add(1)
					<-release
				}
			}
		}
		e := testElection(t, newTestClient(t, fakes))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second) // virtual: a proclamation waited for never comes
		defer cancel()
		ld, err := e.Campaign(ctx, "v")
		require.NoError(t, err)
		require.True(t, byProposal(int64(ld.Term())), "the term %d is not a proposal", ld.Term())
		got, err := testElection(t, newTestClient(t, fakes)).Leader(t.Context())
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "v", Term: ld.Term(), seq: 1}, got)
		synctest.Wait()
		require.Equal(t, int32(5), proclaims.Load(), "the confirmation was not sent to every node")
		close(release)
		synctest.Wait()
		got, err = e.Leader(t.Context())
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "v", Term: ld.Term(), seq: 1}, got, "the confirmation changed the leader")
		require.NoError(t, ld.Resign(t.Context()))
	})
}

// TestGrantAnnouncementNeedsAMajority: where a minority took the
// proposal, the grants announce different terms (each node its own
// counter), and the term is the write-back's; until the candidate
// proclaims it, Leader reports no leader, never the proposal or one
// node's counter. Three of five nodes have counters ahead, so two take
// the proposal; the proclamation is held back while Leader reads.
func TestGrantAnnouncementNeedsAMajority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		reader := testElection(t, newTestClient(t, fakes))
		var once sync.Once
		var read error
		done := make(chan struct{})
		for _, f := range fakes {
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpProclaim {
					// The first proclamation to reach a node reads; every
					// node's waits until that read is done.
					once.Do(func() {
						_, read = reader.Leader(t.Context())
						close(done)
					})
					<-done
				}
			}
		}
		e := testElection(t, newTestClient(t, fakes))
		countersAhead(e, fakes[:3]...)
		ld, err := e.Campaign(t.Context(), "v")
		require.NoError(t, err)
		require.False(t, byProposal(int64(ld.Term())), "the term %d is a proposal", ld.Term())
		require.ErrorIs(t, read, ErrNoLeader, "Leader believed the grants before the proclamation")
		got, err := reader.Leader(t.Context())
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "v", Term: ld.Term(), seq: 1}, got)
		require.NoError(t, ld.Resign(t.Context()))
	})
}

// TestLeaderOfGrantAnnouncements: leaderOf believes an announcement by
// grant only where a majority of the nodes show the holder with its term,
// and waits for answers that could still make one.
func TestLeaderOfGrantAnnouncements(t *testing.T) {
	held := func(meta string) wire.Result {
		return wire.Result{Status: wire.StatusHeld, Answered: true, Value: "tok\x00" + meta}
	}
	pending := wire.Result{}
	for _, c := range []struct {
		name      string
		rs        []wire.Result
		announced bool
		term      uint64
		decided   bool
	}{
		{"a majority agree", []wire.Result{held("127.1~ v"), held("127.1~ v"), held("127.1~ v"), held("130.1~ v"), held("193.1~ v")}, true, 127, true},
		{"each its own", []wire.Result{held("127.1~ v"), held("127.1~ v"), held("128.1~ v"), held("130.1~ v"), held("193.1~ v")}, false, 0, true},
		{"two agree, two to come", []wire.Result{held("127.1~ v"), held("127.1~ v"), held("128.1~ v"), pending, pending}, false, 0, false},
		{"two agree, one to come", []wire.Result{held("127.1~ v"), held("127.1~ v"), held("128.1~ v"), held("130.1~ v"), pending}, false, 0, false},
		{"proclaimed on one", []wire.Result{held("127.1~ v"), held("128.1~ v"), held("193.1 v"), pending, pending}, true, 193, true},
		{"not announced", []wire.Result{held("0.0 v"), held("0.0 v"), held("0.0 v"), pending, pending}, false, 0, true},
	} {
		v := leaderOf(c.rs, 3)
		require.Equal(t, c.announced, v.announced, c.name)
		require.Equal(t, c.term, v.leader.Term, c.name)
		require.Equal(t, c.decided, v.decided, c.name)
		require.True(t, v.held, c.name)
	}
	_, _, byGrant := decodeLeader("127.1~ v")
	require.True(t, byGrant)
}

// resignHandOff has a leader resign while another Client's candidate
// waits, with ahead (if set) run on the nodes between the two; it returns
// the two leaderships and how many acquire attempts the nodes were sent
// after the resignation. With hold, proclamations sent after the
// resignation wait until the test ends, so that reads see what the grants
// announced.
func resignHandOff(t *testing.T, fakes []*fakeNode, hold bool, ahead func(e *Election)) (first, next *Leadership, attempts int32) {
	var resigned atomic.Bool
	var n atomic.Int32
	held := make(chan struct{})
	for _, f := range fakes {
		f.hold = func(o *wire.Op) {
			switch {
			case !resigned.Load():
			case o.Kind == wire.OpAcquireFenced:
				n.Add(1)
			case hold && o.Kind == wire.OpProclaim:
				<-held
			}
		}
	}
	ea, eb := testElection(t, newTestClient(t, fakes)), testElection(t, newTestClient(t, fakes))
	t.Cleanup(func() { close(held) }) // before the Clients' Close, which waits for their proclamations
	first, err := ea.Campaign(t.Context(), "a")
	require.NoError(t, err)
	got := make(chan *Leadership)
	go func() {
		ld, err := eb.Campaign(t.Context(), "b")
		assert.NoError(t, err)
		got <- ld
	}()
	time.Sleep(time.Second) // virtual: the candidate queued and looked
	synctest.Wait()
	if ahead != nil {
		ahead(ea)
	}
	resigned.Store(true)
	require.NoError(t, first.Resign(t.Context()))
	next = <-got
	require.NotNil(t, next)
	return first, next, n.Load()
}

// TestCandidateGrantedByResign: a resignation grants the key to the first
// waiting candidate, with the releaser's proposal for its term and its
// value, as the election's acquire announces (wire's releaseSrc): the
// candidate leads without an attempt of its own, in a larger term, and
// another Client's Leader reads it from the grants' announcement alone
// (the confirming proclamation is held back).
func TestCandidateGrantedByResign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		first, next, attempts := resignHandOff(t, fakes, true, nil)
		require.Zero(t, attempts, "the next candidate attempted: the resignation did not grant it")
		require.Greater(t, next.Term(), first.Term())
		require.True(t, byProposal(int64(next.Term())), "the term %d is not the releaser's proposal", next.Term())
		got, err := testElection(t, newTestClient(t, fakes)).Leader(t.Context())
		require.NoError(t, err)
		require.Equal(t, Leader{Value: "b", Term: next.Term(), seq: 1}, got)
	})
}

// TestCandidateWokenWhereCountersAhead: where a majority's fence counters
// are above the releaser's proposal, the resignation grants nothing (a
// candidate is granted only with a term) and wakes the candidate, whose
// attempt takes the key in a term above the counters.
func TestCandidateWokenWhereCountersAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		first, next, attempts := resignHandOff(t, fakes, false, func(e *Election) { countersAhead(e, fakes[:3]...) })
		require.GreaterOrEqual(t, attempts, int32(3), "the candidate led without attempting")
		require.Greater(t, next.Term(), uint64(1<<52))
		require.Greater(t, next.Term(), first.Term())
	})
}

// TestCandidateGrantTermMutantCaught: a release that announces the
// candidate with another term than the token it grants (the term + 64,
// on every node alike) is caught by what TestCandidateGrantedByResign
// requires: Leader reads a term that no leadership holds.
func TestCandidateGrantTermMutantCaught(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		m := scriptMutant("a release announces the candidate with another term than its token",
			(&wire.Op{Kind: wire.OpRelease}).Source(), "meta = fence .. '.1~'", "meta = (tonumber(fence) + 64) .. '.1~'")
		for _, f := range fakes {
			m.node(f)
		}
		_, next, _ := resignHandOff(t, fakes, true, nil)
		got, err := testElection(t, newTestClient(t, fakes)).Leader(t.Context())
		require.NoError(t, err)
		require.NotEqual(t, next.Term(), got.Term, "not caught: Leader reads the leadership's term")
	})
}
