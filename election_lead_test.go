package redlock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// TestLeadRecampaigns: Lead cancels fn's context when the leadership is
// lost, with the loss as the cause; with WithRecampaign it campaigns again
// and runs fn in a new term, and returns fn's result once fn returns while
// leading. Without it, Lead returns the loss.
func TestLeadRecampaigns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		e := testElection(t, newTestClient(t, fakes), WithTTL(time.Second))
		ctx := t.Context()
		var terms []uint64
		done := errors.New("done")
		err := e.Lead(ctx, "v", func(ctx context.Context, ld *Leadership) error {
			terms = append(terms, ld.Term())
			if len(terms) == 3 {
				return done
			}
			// Someone deletes the key: the next extension finds it gone.
			for _, f := range fakes {
				f.del(e.rkey)
			}
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), ErrExpired)
			return ctx.Err()
		}, WithRecampaign())
		require.ErrorIs(t, err, done)
		require.Len(t, terms, 3)
		require.Less(t, terms[0], terms[1])
		require.Less(t, terms[1], terms[2])

		err = e.Lead(ctx, "v", func(ctx context.Context, ld *Leadership) error {
			for _, f := range fakes {
				f.del(e.rkey)
			}
			<-ctx.Done()
			return nil
		})
		require.ErrorIs(t, err, ErrExpired)
	})
}

// TestLeadAfterFailedAnnouncement: a campaign whose first announcement
// finds the lock gone campaigns again, and fn then runs with a live
// context: the first lock's end was no leadership's. (The counters ahead
// of every proposal make the term the write-back's, which the candidate
// proclaims: a grant announces only a proposal.)
func TestLeadAfterFailedAnnouncement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		e := testElection(t, newTestClient(t, fakes))
		countersAhead(e, fakes...)
		var proclaims atomic.Int32
		for _, f := range fakes {
			f.hold = func(o *wire.Op) {
				if o.Kind == wire.OpProclaim && proclaims.Add(1) <= 3 {
					f.del(o.Key) // the first announcement finds nothing
				}
			}
		}
		ran := errors.New("ran")
		err := e.Lead(t.Context(), "v", func(ctx context.Context, ld *Leadership) error {
			require.NoError(t, ctx.Err(), "fn's context was cancelled by the failed first announcement")
			return ran
		})
		require.ErrorIs(t, err, ran)
		synctest.Wait() // the last node's announcement, after the majority's
		require.Equal(t, int32(6), proclaims.Load(), "not announced twice")
	})
}

// TestEndGate: a lock's early end (Close's ErrClosed included) that comes
// before its leadership was announced is held, and passed on when the gate
// opens, once; later ends pass at once; a gate that never opens (a lock
// given back after a failed announcement) passes nothing on. Close can
// land in that window: Lead would then run fn with a context Close never
// cancels.
func TestEndGate(t *testing.T) {
	var got []error
	g := &endGate{onEnd: func(err error) { got = append(got, err) }}
	g.end(ErrClosed)
	g.end(ErrExpired)
	require.Empty(t, got, "an end before the announcement passed")
	g.open()
	require.Equal(t, []error{ErrClosed}, got)
	g.end(ErrTakenOver)
	require.Equal(t, []error{ErrClosed, ErrTakenOver}, got)

	got = nil
	shut := &endGate{onEnd: func(err error) { got = append(got, err) }}
	shut.end(ErrExpired)
	require.Empty(t, got)
}

// TestElectionClose: Close ends a leadership (resigning it) and the work
// under Lead with ErrClosed, and closes observers' channels.
func TestElectionClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		e := testElection(t, c)
		ctx := t.Context()
		seen := e.Observe(ctx)
		errc := make(chan error)
		go func() {
			errc <- e.Lead(ctx, "v", func(ctx context.Context, _ *Leadership) error {
				<-ctx.Done()
				return nil
			})
		}()
		<-seen
		require.NoError(t, c.Close(ctx))
		require.ErrorIs(t, <-errc, ErrClosed)
		_, open := <-seen
		require.False(t, open)
		_, err := e.Leader(ctx)
		require.ErrorIs(t, err, ErrClosed)
		_, err = e.Campaign(ctx, "v")
		require.ErrorIs(t, err, ErrClosed)
		_, err = testElection(t, newTestClient(t, fakes)).Leader(ctx)
		require.ErrorIs(t, err, ErrNoLeader, "Close did not resign")
	})
}

// TestElectionBadInput: bad names, values and options are typed errors,
// before any node is asked.
func TestElectionBadInput(t *testing.T) {
	fakes := newFakeNodes(3)
	c := newTestClient(t, fakes)
	for name, f := range map[string]func() error{
		"empty name":     func() error { _, err := c.Election(""); return err },
		"long name":      func() error { _, err := c.Election(strings.Repeat("x", maxKeyLen)); return err },
		"metadata":       func() error { _, err := c.Election("e", WithMetadata("m")); return err },
		"fencing":        func() error { _, err := c.Election("e", WithFencing()); return err },
		"max hold":       func() error { _, err := c.Election("e", WithMaxHold(time.Hour)); return err },
		"tiny TTL":       func() error { _, err := c.Election("e", WithTTL(time.Millisecond)); return err },
		"recampaign":     func() error { _, err := c.Election("e", WithRecampaign()); return err },
		"recampaign New": func() error { _, err := New(nil, WithRecampaign()); return err },
		"recampaign Lock": func() error {
			_, err := c.Lock(t.Context(), "k", WithRecampaign())
			return err
		},
		"long value": func() error {
			_, err := testElection(t, c).Campaign(t.Context(), strings.Repeat("x", maxValueLen+1))
			return err
		},
		"Lead nil fn": func() error { return testElection(t, c).Lead(t.Context(), "v", nil) },
		"Lead option": func() error {
			return testElection(t, c).Lead(t.Context(), "v", func(context.Context, *Leadership) error { return nil }, WithTTL(time.Second))
		},
	} {
		err := f()
		require.ErrorIs(t, err, ErrInvalidArgument, name)
	}
	for _, f := range fakes {
		require.Zero(t, f.calls.Load(), "a node was asked")
	}
}
