package redlock

import (
	"context"
	"slices"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is the stray admissions of let-in waiters (letin.go): a
// reader let in, or a writer or a semaphore's waiter granted a key, where
// it does not hold by its place's ID (it attempted instead, gave up, its
// Client closed, or it holds another slot) has that ID released there,
// which also takes its place out of the queue, so that nothing keeps
// others off the key until the place's lapse. So does a waiter whose
// grants can never make a majority (grantsStuck): it gives them back.

// abandon notes that w ended, holding held (nil: nothing), and returns,
// per key of w's (w.keys' order), the nodes where its place's ID must be
// released, nil for none, if it is a let-in waiter: every node for a key
// it does not hold by, since a let-in may be on its way (its notice, or
// the subscription, lost or late: then it would keep writers off the node
// until the place's lapse), and the release also takes the place out, so
// none can follow it; a semaphore's waiter that holds one slot has its
// place in the others released so. Notices of admissions that still
// reach this Client are released as they come (letInNotice), for two
// leases: by then any admission the nodes made has lapsed. (A set holds
// every key of its place, a semaphore's waiter one slot.) Callers hold
// h.mu.
func (h *handoff) abandon(w *waiter, held *Lock) []uint64 {
	if w.sends == nil {
		return nil
	}
	all := uint64(1)<<len(h.c.nodes) - 1
	nodes := make([]uint64, len(w.keys))
	for k := range nodes {
		switch {
		case held == nil || w.t.slots != nil && w.admitsOf(held.rkey) != &w.keys[k]:
			nodes[k] = all
		case w.took: // it holds by its place's ID here: its Unlock releases it
		case !w.attempted: // a reader that holds by its attempt
			nodes[k] = all
		default:
			// A writer that holds by its attempt (its own, or one handed
			// to it: the hand-over inside one Client, every time): its
			// place left the nodes that granted the attempt, and one its
			// attempt did not take is rare (a release that came between
			// its look and its attempt, on a node that refused the
			// attempt): released where its notice came, now or later,
			// not on every node each time.
			nodes[k] = w.keys[k].admitted
		}
	}
	if w.took {
		return nodes // (its other slots' grants cannot come after their release)
	}
	now := time.Now()
	if h.abandoned == nil {
		h.abandoned = map[string]time.Time{}
	}
	for id, at := range h.abandoned {
		if now.Sub(at) > 2*h.c.cfg.lease {
			delete(h.abandoned, id)
		}
	}
	h.abandoned[w.ID] = now
	return nodes
}

// leavePlace takes the place p of a Lock that won by its attempt out of
// the queues of nodes, which refused the attempt: by a release of its ID
// where a release may have granted that place a key (a writer's or a
// set's: see grantable), which also deletes such a grant if one came
// before it, and hands the key on; else by a leave. A grant that comes
// after the Lock's Client has closed would otherwise wait for the place's
// lapse, its notice lost (simulator seed 428, under load).
func (c *Client) leavePlace(ctx context.Context, nodes []node, t target, p *wire.Place, ttl time.Duration) {
	switch {
	case len(nodes) == 0:
	case p == nil || !isGrantee(p.ID):
		c.leaveOn(ctx, nodes, t, p, ttl)
	case t.multiKey(): // one release over every key of the set
		c.hand.postRelease(t, p.ID, nodes, nil)
	default:
		c.hand.releasePlace(t.rkey, p.ID, nodes)
	}
}

// releaseLetIn releases the place ID id from rkey's readers on nodes (bit
// i: node i), in the background; the release also takes the place out of
// the queue there.
func (h *handoff) releaseLetIn(rkey, id string, nodes uint64) {
	h.releasePlace(rkey, id, h.nodesIn(nodes))
}

// nodesIn returns the nodes in the set nodes (bit i: node i).
func (h *handoff) nodesIn(nodes uint64) []node {
	var ns []node
	for i, n := range h.c.nodes {
		if nodes&(1<<i) != 0 {
			ns = append(ns, n)
		}
	}
	return ns
}

// releasePlace releases the place ID id, a let-in reader's or a granted
// writer's, on nodes, in the background: the key or entry it may hold
// there, and the place.
func (h *handoff) releasePlace(rkey, id string, nodes []node) {
	t := target{key: rkey, rkey: rkey, mode: wire.ModeRead}
	if isGrantee(id) {
		t.mode = wire.ModeMutex
	}
	h.postRelease(t, id, nodes, nil)
}

// postRelease releases the place ID id at t's keys on nodes, in the
// background (see releasePlace); late, if set, sees each node's reply.
func (h *handoff) postRelease(t target, id string, nodes []node, late lateFunc) {
	if len(nodes) == 0 || mutated(mutLetInKept) {
		return
	}
	o := t.op(wire.OpRelease, id, "", 0)
	o.Wake = h.wakeArg
	h.c.postThen(context.Background(), o, nodes, h.c.cfg.lease, late)
}

// giveBackStuck gives back the grants to w's place that its look rs (a
// round per key: its key's, a set's keys', or each of a semaphore's
// slots') found stuck (grantsStuck): each node there then grants the key
// to its queue's head, with a notice. A semaphore's slots are given back
// each on its own: w can hold by any one of them; a set's keys together,
// by one release over the set: it holds by all of them or by none.
// (A set keeps its place: see giveBackSet.) It reports whether it gave
// any back.
func (c *Client) giveBackStuck(w *waiter, rs ...*round) bool {
	stuck := make([]uint64, len(rs))
	admitted := c.hand.admittedOf(w)
	for i, r := range rs {
		var notices uint64 // (none for a waiter never granted: no keys)
		if i < len(admitted) {
			notices = admitted[i]
		}
		stuck[i] = grantsStuck(r, w, c.quorum(), notices)
	}
	if !slices.ContainsFunc(stuck, func(m uint64) bool { return m != 0 }) || !c.hand.giveBack(w) {
		return false
	}
	for i, m := range stuck {
		switch {
		case m == 0:
		case w.t.multiKey():
			c.hand.giveBackSet(w, m)
		case w.t.choosesSlot():
			c.hand.releaseLetIn(w.t.slots[i].rkey, w.ID, m)
		case w.t.reader():
			c.hand.giveBackLetIns(w, m)
		default:
			c.hand.releaseLetIn(w.t.rkey, w.ID, m) // to the queue's head there
		}
	}
	return true
}

// grantsStuck returns the nodes (bit i: node i) where a look r at one
// key's queue (a one-key waiter's, or a semaphore's waiter's at one slot)
// found w's place granted the key, if the others are against it on so
// many that those grants can never make a majority: the key free there
// with another waiter first, or granted to another waiter's place (or,
// for a writer, held by readers) while another waiter than w is first;
// for a reader, whose look names no holder, held while a writer is
// first. With them go the nodes that did not answer r but whose notices
// granted w (admitted): a look ends once the nodes it heard before have
// answered, and the one that granted w may not be among them (2 random
// plans in 6,000 of TestGrantsSplitPlans held the key 240–570 ms, until
// the next regular look). Releases ran on nodes whose queues did
// not yet hold the same waiters (Lock calls that queued together, their
// joins still on their way), and each granted its own first waiter: no
// one holds, and every grant stays until its place's lapse, a lease
// (docs/design.md, "Grants split between waiters"). w then gives its
// grants back (giveBack), and each of those nodes grants the key to its
// first waiter (a reader's let-ins too: docs/design.md, "A read-write
// lock's readers split with writers"). A waiter first where another's
// place holds the key waits for that one to do so.
func grantsStuck(r *round, w *waiter, quorum int, admitted uint64) (granted uint64) {
	switch {
	case mutated(mutGrantsStuckWait):
		return 0
	case w.t.multiKey():
		return setGrantsStuck(r, w, quorum)
	}
	against := 0
	for i, res := range r.results {
		switch {
		case !res.Answered || res.Status == wire.StatusFailed:
			granted |= admitted & (1 << i) // its notice came: given back too
		case res.Head == wire.LetIn:
			granted |= 1 << i
		case res.Status == wire.StatusQueued:
			against++
		case res.Status != wire.StatusHeld || res.Head == w.ID:
		case w.t.reader(): // its look names no holder: against where a writer is first
			if isGrantee(res.Head) {
				against++
			}
		case isGrantee(res.Value) || res.Value == "": // another's place, or readers, hold it
			against++
		}
	}
	if len(r.results)-against >= quorum {
		return 0
	}
	return granted
}

// giveBackLetIns releases a reader w's let-ins on nodes (bit i: node i),
// in the background, as releaseLetIn does. Until a node has answered,
// its let-ins do not count (admission.backing): a let-in that names a
// look after the give-back came after the release ran only once the
// release is known to have run (the look, on a new connection, could
// overtake a release still on its way on a dead one). A release that
// failed leaves the node out for good.
func (h *handoff) giveBackLetIns(w *waiter, nodes uint64) {
	h.mu.Lock()
	w.backing |= nodes
	h.mu.Unlock()
	ns := h.nodesIn(nodes)
	h.postRelease(target{key: w.t.rkey, rkey: w.t.rkey, mode: wire.ModeRead}, w.ID, ns, func(j int, res wire.Result) func() {
		if res.Status != wire.StatusFailed {
			h.mu.Lock()
			w.backing &^= 1 << slices.Index(h.c.nodes, ns[j])
			h.mu.Unlock()
		}
		return nil
	})
}

// admittedOf returns, per key of w's (w.keys' order), the nodes whose
// notices said they let w in or granted it the key.
func (h *handoff) admittedOf(w *waiter) []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make([]uint64, len(w.keys))
	for k, a := range w.keys {
		m[k] = a.admitted
	}
	return m
}

// giveBackSet releases the keys granted to a set's place w on nodes (bit
// i: node i), in the background, and keeps its place in every key's
// queue: each such key is reserved for its queue's first waiter, which is
// woken (wire's Op.KeepPlace). A release of the place's ID would take the
// place out too, as for a set that ended, and until its next look put it
// back an unqueued attempt could take a key it waits for (simulator seed
// 54, in a first build).
func (h *handoff) giveBackSet(w *waiter, nodes uint64) {
	o := w.t.op(wire.OpRelease, w.ID, "", 0)
	o.Wake, o.WakeOnly, o.KeepPlace = h.wakeArg, true, true
	h.c.post(context.Background(), o, h.nodesIn(nodes), h.c.cfg.lease)
}

// setGrantsStuck is grantsStuck for a set's look r: the nodes where any
// of its keys is granted to w's place, if on one of its keys the others
// are against it on so many that its grants there can never make a
// majority: the key free with another waiter first, or granted to
// another waiter's place while w is not first in its queue (the look
// answers each key's holder, and whether it is granted to w or w is
// first: wire's queueMultiSrc). A set holds by all its keys or none, so
// it then gives back every key's grants.
func setGrantsStuck(r *round, w *waiter, quorum int) (granted uint64) {
	stuck := false
	for k := range w.t.rkeys {
		against := 0
		for _, res := range r.results {
			holder, d := keyHolder(res, k), res.Details()
			switch {
			case !res.Answered || res.Status == wire.StatusFailed || d.Granted&(1<<k) != 0:
			case holder == "" && d.Waits&(1<<k) != 0:
				against++
			case isGrantee(holder) && holder != w.ID && d.First&(1<<k) == 0:
				against++
			}
		}
		stuck = stuck || len(r.results)-against < quorum
	}
	for i, res := range r.results {
		if stuck && res.Answered && res.Status != wire.StatusFailed && res.Details().Granted != 0 {
			granted |= 1 << i
		}
	}
	return granted
}

// giveBack notes that w gives back the grants its last look found stuck
// (grantsStuck), unless its admissions hold the lock by now (their wake
// is on its way) or it took them: they count no more, so that w can
// never hold by a node whose grant it released. A writer's (a set's, a
// semaphore's waiter's) count no more as after an attempt: later ones
// wake it to attempt, and its attempt takes them from its place. A
// reader's attempt cannot take its let-ins where a writer now waits
// ahead of it, so a reader instead forgets its looks so far: let-ins
// that name them do not count, and those that name a later look do.
// Each later look leaves on its node's stream after the release, so
// what it is let in by comes after the release ran (docs/design.md, "A
// read-write lock's readers split with writers"). It reports whether to
// release them.
func (h *handoff) giveBack(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if w.took || w.sends == nil {
		return false
	}
	if !w.attempted && w.holdsAny(h.letInQuorum()) {
		return false
	}
	switch {
	case mutated(mutGiveBackCounts):
	case w.t.reader():
		clear(w.sends)
		for k := range w.keys {
			w.keys[k].counted = 0
		}
	default:
		w.attempted = true
	}
	return true
}
