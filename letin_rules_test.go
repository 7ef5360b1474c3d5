package redlock

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// The Client's rules for a reader let in by a writer's release (letin.go),
// each a schedule built to break it. The simulator does not catch these
// three within its budget (docs/testing.md): the lock extends to its TTL
// at once, and only a failed extension leaves a validity claimed too long
// exposed. So each schedule returns what went wrong ("" for nothing), the
// ordinary tests below require nothing, and TestLetInMutantsCaught (a
// build with -tags redlock_mutants) requires something with each rule's
// mutant switched on.

// letInWaiter is a reader of rw:d waiting in a Client over 5 fake nodes,
// which a writer's release could let in.
func letInWaiter(t *testing.T) (*Client, target, *lockConfig, *waiter) {
	c := newTestClient(t, newFakeNodes(5))
	tg := target{key: "rw:d", rkey: c.redisKey("rw:d"), mode: wire.ModeRead}
	lc := &lockConfig{ttl: time.Minute}
	w := c.hand.join(tg, lc)
	t.Cleanup(func() { c.hand.leave(w) })
	return c, tg, lc, w
}

// lookRound is a look's round in which the nodes answered (others had not
// when it was decided) with w's place refreshed.
func lookRound(w *waiter, answered ...int) *round {
	r := &round{results: make([]wire.Result, 5)}
	for _, i := range answered {
		r.results[i] = wire.Result{Answered: true, Status: wire.StatusQueued, Head: w.ID}
	}
	return r
}

// letInValidityBroken: a reader's look at t0 reaches every node, its next
// 300 ms later only nodes 0 and 1 (2, 3 and 4 answer nothing in time);
// 200 ms after that, a writer's release lets it in on 2, 3 and 4. Their
// places' lapses count from t0, so the lock must be valid until t0 + the
// lease − the drift at most: not from the later look (nodes 2–4 never
// answered it), not from the notices.
func letInValidityBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w := letInWaiter(t)
		t0 := time.Now()
		c.hand.noteLook(w, t0, lookRound(w, 0, 1, 2, 3, 4))
		time.Sleep(300 * time.Millisecond)
		c.hand.noteLook(w, time.Now(), lookRound(w, 0, 1))
		time.Sleep(200 * time.Millisecond)
		for i := 2; i < 5; i++ {
			c.hand.letInNotice(i, tg.rkey, w.ID)
		}
		l := c.takeLetIn(t.Context(), tg, lc, w, 1)
		if l == nil {
			broken = "let in on a majority, not held"
			return
		}
		defer func() { _ = l.Unlock(context.Background()) }()
		lease := c.cfg.lease
		if bound := t0.Add(lease - drift(lease, c.cfg.drift)); l.validUntil().After(bound) {
			broken = fmt.Sprintf("valid until %v after the first look, past its places' lapse (%v)", l.validUntil().Sub(t0), bound.Sub(t0))
		}
	})
	return broken
}

// letInGuardBroken: nodes 2 and 3 confirm the Client's subscription again
// (a reconnect, as a restart of the node causes) and then let the waiter
// in, with node 1: only node 1 counts, within the restart guard's period,
// so the waiter does not hold by them. It attempts instead (a majority
// let it in), where the guard judges each grant. Two admissions alone
// never hold.
func letInGuardBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w := letInWaiter(t)
		c.hand.noteLook(w, time.Now(), lookRound(w, 0, 1, 2, 3, 4))
		c.hand.letInNotice(0, tg.rkey, w.ID)
		c.hand.letInNotice(1, tg.rkey, w.ID)
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broken = "held by two admissions of five"
			_ = l.Unlock(context.Background())
			return
		}
		c.hand.subscribed(2)
		c.hand.subscribed(3)
		c.hand.letInNotice(2, tg.rkey, w.ID)
		c.hand.letInNotice(3, tg.rkey, w.ID)
		select {
		case <-w.wake:
		default:
			broken = "let in on a majority, and not woken to attempt"
			return
		}
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broken = "held by admissions of nodes whose subscriptions had just reconnected"
			_ = l.Unlock(context.Background())
		}
	})
	return broken
}

func TestLetInValidityFromLooks(t *testing.T) {
	if b := letInValidityBroken(t); b != "" {
		t.Fatal(b)
	}
}

func TestLetInGuardAndMajority(t *testing.T) {
	if b := letInGuardBroken(t); b != "" {
		t.Fatal(b)
	}
}

// TestLetInMutantsCaught: each rule's mutant breaks its schedule.
func TestLetInMutantsCaught(t *testing.T) {
	if !mutantsBuilt {
		t.Skip("the mutants exist with -tags redlock_mutants (make test)")
	}
	for _, m := range []struct {
		name     string
		code     codeMutant
		schedule func(*testing.T) string
	}{
		{"validity from the notices' arrival", mutLetInFromNotice, letInValidityBroken},
		{"validity from a look the node did not answer", mutLetInUnanswered, letInValidityBroken},
		{"admissions counted past a reconnect", mutLetInUnguarded, letInGuardBroken},
		{"a minority of admissions holds", mutLetInMinority, letInGuardBroken},
	} {
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
