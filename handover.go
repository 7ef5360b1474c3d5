package redlock

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is the hand-over inside one Client: an Unlock whose own Client
// has the key's next waiter asleep sends that waiter's next attempt in the
// same batch as the release, right behind it on each node, and the waiter
// takes that round as its attempt. A hand-off between two Lock calls of one
// Client is then one round where it was two (the release, then the woken
// waiter's attempt). The nodes run nothing new: the attempt is the
// waiter's ordinary acquire, gated by the queue and fenced as any, with a
// token of its own, and its validity counts from its send, as any
// attempt's (docs/design.md, "The hand-over inside one Client").

// handedAttempt is a waiter's attempt that an Unlock of its Client sends.
type handedAttempt struct {
	a        *acquisition
	req      request // its acquire round's, as acquireRequest made it
	deadline time.Time
	sent     chan struct{} // closed once sent: a.r, req and deadline are set
}

// claim picks the waiter that an Unlock of l may send an attempt for with
// its release: this Client's waiter for l's key with the lowest ticket, a
// one-key mutex's (as l is), asleep between its tries, whose last look at
// the queue found only waiters of this Client ahead of it on a majority
// of nodes. They have all been served since (it has the lowest ticket),
// and a waiter of another Client that joined since came later: it is
// first. (Should it not be, on a node that lost its place, say, the
// queue's gate refuses the attempt there, and the release wakes the
// first waiter as usual: an attempt in vain.) It marks the waiter handed
// the attempt, which it takes when it wakes (awake), and wakes it. nil:
// none, or l's release is not a plain one (a cooldown, a retry of a
// part-failed Unlock), or the Client is closing.
func (h *handoff) claim(l *Lock, cooldown time.Duration, partial bool) *handedAttempt {
	if cooldown != 0 || partial || l.mode != wire.ModeMutex || l.rkeys != nil || h.c.checkOpen() != nil {
		return nil // (a closing Client's waiters are giving up)
	}
	if h.live.Load() == 0 {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[l.rkey]
	if q == nil {
		return nil
	}
	var w *waiter
	for _, x := range q.waiters {
		if w == nil || x.Ticket < w.Ticket {
			w = x
		}
	}
	if w == nil || w.asleep == nil || w.asleep.token != "" || !w.nextHere.Load() || w.t.mode != wire.ModeMutex || w.t.rkeys != nil || w.t.slots != nil {
		return nil
	}
	ha := &handedAttempt{a: &acquisition{target: w.t, token: rand.Text(), lc: w.asleep, place: &w.Place}, sent: make(chan struct{})}
	w.asleep, w.handed = nil, ha
	w.attempted = true // its admissions count no longer: the attempt may take them
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return ha
}

// sendHandOver sends the release rel and the handed attempt ha to every
// node in one batch, the attempt right behind the release, and collects
// the release's round; the waiter collects the attempt's (attemptHanded).
func (c *Client) sendHandOver(ctx context.Context, rel request, ha *handedAttempt) *round {
	ha.req = c.acquireRequest(ha.a)
	rel.op.WakeOnly = true // the attempt takes the key: the release must not grant it (letin.go)
	rel.nodes, rel.timed = c.nodes, c.timed
	ha.req.nodes, ha.req.timed = c.nodes, c.timed
	ha.a.start = time.Now() // before the batch: validity counts from the first send
	rs, deadlines := startBatch(ctx, []request{rel, ha.req})
	ha.a.r, ha.deadline = rs[1], deadlines[1]
	close(ha.sent)
	rs[0].collect(ctx, rel.timeout, deadlines[0])
	return rs[0]
}

// attemptHanded takes the attempt ha an Unlock sent for the waiter as the
// waiter's attempt number n: it collects its round (whatever ctx says,
// so that the grants of one that fails are taken back) and concludes it
// as any attempt.
func (c *Client) attemptHanded(ctx context.Context, ha *handedAttempt, n int) (*Lock, *QuorumError) {
	a := ha.a
	a.n, a.handed = n, true
	a.r.collect(ctx, ha.req.timeout, ha.deadline)
	c.settle(ctx, a, ha.req.op)
	return c.conclude(ctx, a)
}

// asleep marks w asleep between its tries, with its Lock call's config: an
// Unlock of this Client may hand it an attempt meanwhile (claim).
func (h *handoff) asleep(w *waiter, lc *lockConfig) {
	h.mu.Lock()
	w.asleep = lc
	h.mu.Unlock()
}

// awake marks w awake, and returns the attempt an Unlock handed it while
// it slept, once sent; nil if none. Every sleep of a waiter ends with it:
// a handed attempt must be taken, if only to take back its grants.
func (h *handoff) awake(w *waiter) *handedAttempt {
	h.mu.Lock()
	ha := w.handed
	w.asleep, w.handed = nil, nil
	h.mu.Unlock()
	if ha != nil {
		<-ha.sent
		select { // claim's wake, if the sleep ended otherwise
		case <-w.wake:
		default:
		}
	}
	return ha
}

// notePlace records whether w's look r found, on a majority of the nodes,
// only waiters of this Client ahead of w (see claim).
func notePlace(w *waiter, r *round, quorum int) {
	n := 0
	for _, res := range r.results {
		if res.Answered && res.OwnAhead {
			n++
		}
	}
	w.nextHere.Store(n >= quorum)
}
