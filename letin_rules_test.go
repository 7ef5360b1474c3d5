package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// The Client's rules for a reader let in by a writer's release, and a
// writer granted the key by a release (letin.go), each a schedule built
// to break it. The simulator did not catch these three within its budget
// (docs/testing.md): the lock extends to its TTL soon, and only a
// failed extension leaves a validity claimed too long exposed to a second
// holder. Since its check that a valid Lock is backed by a majority of
// nodes (2026-12-03) it catches the two validity rules' mutants, and the
// reconnect's with the read-write workload. So each schedule returns what
// went wrong ("" for nothing), the ordinary tests below require nothing,
// and TestLetInMutantsCaught (a build with -tags redlock_mutants) requires
// something with each rule's mutant switched on.

// letInWaiter is a reader of rw:d waiting in a Client over 5 fake nodes,
// which a writer's release could let in.
func letInWaiter(t *testing.T) (*Client, target, *lockConfig, *waiter) {
	c := newTestClient(t, newFakeNodes(5))
	tg := target{key: "rw:d", rkey: c.redisKey("rw:d"), mode: wire.ModeRead}
	lc := &lockConfig{ttl: time.Minute}
	w := c.hand.join(tg, lc)
	t.Cleanup(func() { c.hand.leave(w, nil) })
	heardAll(c)
	return c, tg, lc, w
}

// heardAll notes every node's run_id as a look's answer after the
// subscription's confirmation brings it (the subscriptions of fake nodes
// are confirmed at once).
func heardAll(c *Client) {
	for i, n := range c.nodes {
		c.hand.heardProcess(i, n.(*fakeNode).mem.RunID(), c.hand.confirms[i].Load())
	}
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
// count, which never hold; nodes 2 and 3 could still make them three, so
// it is not woken yet. Then nodes 2 and 3 confirm the Client's
// subscription again (a reconnect, as a restart of the node causes) and
// let it in: until a look tells their processes they do not count, so it
// does not hold by them, and with no majority left to count it is woken
// to attempt (where the guard judges each grant).
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
		c.hand.subscribed(2)
		c.hand.subscribed(3)
		c.hand.letInNotice(2, tg.rkey, w.ID, n)
		c.hand.letInNotice(3, tg.rkey, w.ID, n)
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broken = "held by admissions of nodes whose subscriptions had just reconnected"
			_ = l.Unlock(context.Background())
			return
		}
		select {
		case <-w.wake:
		default:
			broken = "let in on a majority that cannot count, and not woken to attempt"
		}
	})
	return broken
}

// letInRestartBroken: a Client knows every node's process (its acquire
// heard their run_ids); nodes 0, 1 and 2 restart empty; then a reader of
// the Client queues, its subscriptions confirmed for the first time, by
// the new processes, and those nodes let it in (say by a writer's
// release that the restart made possible). Its look brought back their
// new run_ids: the restart guard refuses their grants for its period,
// and their admissions must not count either (simulator seed 11274, with
// the reconnect rule that came before, which missed a first
// confirmation).
func letInRestartBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		c := newTestClient(t, fakes)
		l, err := c.TryLock(t.Context(), "other")
		if err != nil {
			broken = err.Error()
			return
		}
		_ = l.Unlock(t.Context())
		for _, f := range fakes[:3] {
			f.restart()
		}
		tg := target{key: "rw:d", rkey: c.redisKey("rw:d"), mode: wire.ModeRead}
		lc := &lockConfig{ttl: time.Minute}
		w := c.hand.join(tg, lc)
		defer c.hand.leave(w, nil)
		c.pollQueue(t.Context(), lc, w)
		n := strconv.FormatInt(w.seq, 10)
		for i := range 3 {
			c.hand.letInNotice(i, tg.rkey, w.ID, n)
		}
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broken = "held by admissions of nodes that restarted before its subscriptions"
			_ = l.Unlock(context.Background())
		}
	})
	return broken
}

func TestLetInAfterUnseenRestart(t *testing.T) {
	if b := letInRestartBroken(t); b != "" {
		t.Fatal(b)
	}
}

// grantWaiter is a mutex's Lock waiting for k in a Client over 5 fake
// nodes, which knows every node's process, and the number of its look.
func grantWaiter(t *testing.T, opts ...Option) (*Client, target, *lockConfig, *waiter, string) {
	return waiterWith(t, &lockConfig{ttl: time.Minute}, opts...)
}

// waiterWith is grantWaiter's Lock with lc.
func waiterWith(t *testing.T, lc *lockConfig, opts ...Option) (*Client, target, *lockConfig, *waiter, string) {
	c := newTestClient(t, newFakeNodes(5), opts...)
	tg := target{key: "k", rkey: c.redisKey("k"), mode: wire.ModeMutex}
	w := c.hand.join(tg, lc)
	t.Cleanup(func() { c.hand.leave(w, nil) })
	heardAll(c)
	return c, tg, lc, w, strconv.FormatInt(c.hand.numberLook(w, time.Now()), 10)
}

// grantAfterAttemptBroken: a writer waiting for k is granted the key by
// node 0's release, then attempts (its notices too few): the attempt's
// gate may reserve node 0's key for another waiter, or take it and its
// take-back delete it. Nodes 1 and 2 then grant it too: with node 0 that
// would be a majority, of which node 0 no longer holds it. So grants
// count no more once the writer has attempted: they wake it to attempt.
func grantAfterAttemptBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		c, tg, lc, w, n := grantWaiter(t)
		c.hand.letInNotice(0, tg.rkey, w.ID, n)
		if l := c.takeLetIn(t.Context(), tg, lc, w, 1); l != nil {
			broken = "held by one grant of five"
			_ = l.Unlock(context.Background())
			return
		}
		c.hand.letInNotice(1, tg.rkey, w.ID, n)
		c.hand.letInNotice(2, tg.rkey, w.ID, n)
		if l := c.takeLetIn(t.Context(), tg, lc, w, 2); l != nil {
			broken = "held by grants counted across its attempt"
			_ = l.Unlock(context.Background())
			return
		}
		select {
		case <-w.wake:
		default:
			broken = "granted on a majority after its attempt, and not woken to attempt again"
		}
	})
	return broken
}

func TestGrantsCountUntilAttempt(t *testing.T) {
	if b := grantAfterAttemptBroken(t); b != "" {
		t.Fatal(b)
	}
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
	requireCaught(t, []scheduledMutant{
		{"validity from the notices' arrival", mutLetInFromNotice, letInValidityBroken},
		{"validity from the last look, not the one the node names", mutLetInLastLook, letInValidityBroken},
		{"admissions counted past a reconnect", mutLetInUnguarded, letInGuardBroken},
		{"admissions counted from a node that restarted before the subscription", mutLetInUnguarded, letInRestartBroken},
		{"a minority of admissions holds", mutLetInMinority, letInGuardBroken},
		{"a writer's grants counted across its attempt", mutGrantAfterAttempt, grantAfterAttemptBroken},
	})
}

// TestLetInEventNodes: a let-in's acquire event says what each node did.
// Nodes 0, 1 and 3 granted the waiter the key and count; node 2 granted
// it after its subscription reconnected, before a look let the restart
// guard judge its process, so it does not count; node 4 has not granted
// it.
func TestLetInEventNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var acquires []Event
		c, tg, lc, w, n := grantWaiter(t, WithObserver(func(e Event) {
			if e.Kind == EventAcquire {
				mu.Lock()
				acquires = append(acquires, e)
				mu.Unlock()
			}
		}))
		c.hand.subscribed(2)
		for _, i := range []int{0, 1, 2, 3} {
			c.hand.letInNotice(i, tg.rkey, w.ID, n)
		}
		l := c.takeLetIn(t.Context(), tg, lc, w, 1)
		require.NotNil(t, l, "granted on a majority that counts")
		defer func() { _ = l.Unlock(context.Background()) }()
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, acquires, 1)
		e := acquires[0]
		require.True(t, e.LetIn)
		require.Len(t, e.Nodes, 5)
		want := []error{nil, nil, ErrNodeRestarted, nil, ErrQueued}
		for i, r := range e.Nodes {
			require.Equal(t, c.nodes[i].Name(), r.Node)
			require.ErrorIs(t, r.Err, want[i], "node %d", i)
			if want[i] == nil {
				require.NoError(t, r.Err, "node %d", i)
			}
		}
	})
}
