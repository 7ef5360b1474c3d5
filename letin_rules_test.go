package redlock

import (
	"context"
	"fmt"
	"strconv"
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

// letInValidityBroken: a reader looks at t0 (look 1), again 300 ms later
// (look 2), and 200 ms after that a writer's release lets it in on nodes
// 2, 3 and 4, whose places look 1 set last (look 2 had not reached them).
// Their notices name look 1, so the lock must be valid until t0 + the
// lease − the drift at most: not from look 2, not from the notices.
func letInValidityBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w := letInWaiter(t)
		t0 := time.Now()
		first := c.hand.numberLook(w, t0)
		time.Sleep(300 * time.Millisecond)
		c.hand.numberLook(w, time.Now())
		time.Sleep(200 * time.Millisecond)
		for i := 2; i < 5; i++ {
			c.hand.letInNotice(i, tg.rkey, w.ID, strconv.FormatInt(first, 10))
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

// letInGuardBroken: nodes 0 and 1 let the waiter in, and node 4 too but
// naming no look of the waiter's (its place put back by an attempt): two
// count, which never hold; three let it in, which wakes it to attempt.
// Then nodes 2 and 3 confirm the Client's subscription again (a
// reconnect, as a restart of the node causes) and let it in: within the
// restart guard's period they do not count, so it does not hold by them
// (it attempts, where the guard judges each grant).
func letInGuardBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w := letInWaiter(t)
		n := strconv.FormatInt(c.hand.numberLook(w, time.Now()), 10)
		c.hand.letInNotice(0, tg.rkey, w.ID, n)
		c.hand.letInNotice(1, tg.rkey, w.ID, n)
		c.hand.letInNotice(4, tg.rkey, w.ID, "")
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broken = "held by two admissions of five (and one that names no look)"
			_ = l.Unlock(context.Background())
			return
		}
		select {
		case <-w.wake:
		default:
			broken = "let in on a majority, and not woken to attempt"
			return
		}
		c.hand.subscribed(2)
		c.hand.subscribed(3)
		c.hand.letInNotice(2, tg.rkey, w.ID, n)
		c.hand.letInNotice(3, tg.rkey, w.ID, n)
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
		{"validity from the last look, not the one the node names", mutLetInLastLook, letInValidityBroken},
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
