package redlock

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
)

// The validity's rule, a schedule built to break it (as letin_rules_test.go
// does for a let-in's): a lock is valid until its acquire's send plus the
// TTL, less the drift, never from the replies. The simulator caught its
// mutant (mutValidityFromReply) only now and then: at seeds 17 to 78 on a
// quiet machine, and not in 300 beside a CPU hog (2026-11-29); since
// 2026-12-03 it has a budget of 1,000 in the catalogue (caught at 9 to 94
// from six starts, two of them beside CPU hogs). TestCodeMutantsCaught
// still runs this schedule under the mutant, and another such
// (lateWinnerBroken).

// slowReplies is a node that runs each acquire as it arrives and whose
// reply then takes pause to come back: a key's TTL runs from about the
// send, not from the reply.
type slowReplies struct {
	*fakeNode
	pause time.Duration
}

func (n slowReplies) Start(c nodeio.Call) {
	var pause time.Duration
	if wire.IsAcquire(c.Op.Kind) {
		pause = n.pause
	}
	n.startPaused(c, pause, turn{})
}

// StartAll starts a batch's calls one by one (their order does not matter
// here).
func (n slowReplies) StartAll(calls []nodeio.Call) {
	for _, c := range calls {
		n.Start(c)
	}
}

// validityFromReplyBroken: every node's reply to a TryLock takes 300 ms
// back, so the lock must claim no validity past the send plus its TTL,
// less the drift.
func validityFromReplyBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		nodes := make([]node, len(fakes))
		for i, f := range fakes {
			nodes[i] = slowReplies{fakeNode: f, pause: 300 * time.Millisecond}
		}
		c, err := newClient(nodes, []Option{WithAnyNodeCount(), WithNodeTimeout(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Close(context.Background()) }()
		const ttl = 5 * time.Second
		sent := time.Now()
		l, err := c.TryLock(t.Context(), "k", WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = l.Unlock(context.Background()) }()
		if bound := sent.Add(ttl - drift(ttl, c.cfg.drift)); l.validUntil().After(bound) {
			broken = fmt.Sprintf("valid until %v after the send, past its keys' TTL less the drift (%v)", l.validUntil().Sub(sent), bound.Sub(sent))
		}
	})
	return broken
}

func TestValidityFromTheSend(t *testing.T) {
	if b := validityFromReplyBroken(t); b != "" {
		t.Fatal(b)
	}
}

// TestCodeMutantsCaught: each schedule catches its mutant of the
// library's code, which the simulator catches only now and then, in a
// build with -tags redlock_mutants (make test).
func TestCodeMutantsCaught(t *testing.T) {
	requireCaught(t, []scheduledMutant{
		{"validity counted from the majority's reply, not the send", mutValidityFromReply, validityFromReplyBroken},
		{"a failed attempt's late grants given back without a notice (92fe7ff's bug)", mutSilentTakeBack, lateWinnerBroken},
	})
}

// scheduledMutant is a mutant of the library's code and a schedule built
// to break the rule it breaks: the schedule returns what went wrong, ""
// for nothing.
type scheduledMutant struct {
	name     string
	code     codeMutant
	schedule func(*testing.T) string
}

// requireCaught requires each mutant to break its schedule, in a build
// with -tags redlock_mutants (make test); other builds skip.
func requireCaught(t *testing.T, ms []scheduledMutant) {
	if !mutantsBuilt {
		t.Skip("the mutants exist with -tags redlock_mutants (make test)")
	}
	for _, m := range ms {
		t.Run(m.name, func(t *testing.T) {
			activeMutants.Store(uint32(m.code))
			defer activeMutants.Store(0)
			if b := m.schedule(t); b == "" {
				t.Fatal("not caught")
			} else {
				t.Log("caught:", b)
			}
		})
	}
}
