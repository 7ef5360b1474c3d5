package redlock

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The simulator's checkers: what a run's recorded history must satisfy.

// violations lists what the run's history breaks: two holders of a key
// inside their validity windows at once (readers of a read-write lock
// share it); a fencing token handed out twice for a key, or one not larger
// than the token of a holding of that key that ended before it began.
// Tokens assume persistent counters (docs/fencing.md): two holdings with a
// restart of a node that kept nothing between their starts are not
// compared.
func (s *simRun) violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.overlaps()
	v = append(v, s.outOfOrder()...)
	v = append(v, s.jumped()...)
	v = append(v, s.unreached()...)
	v = append(v, s.starved()...)
	v = append(v, s.slowHandOffs()...)
	v = append(v, s.staleReads()...)
	v = append(v, s.unobserved()...)
	v = append(v, s.blindFailures()...)
	v = append(v, s.unbacked...)
	for _, k := range s.left {
		v = append(v, "left after every Client closed: "+k)
	}
	return v
}

// overlaps lists two holders of a key inside their validity windows at
// once, and fencing tokens out of order; callers hold s.mu.
func (s *simRun) overlaps() []string {
	byKey := map[string][]simHolding{}
	for _, h := range s.holdings {
		for _, k := range h.keys {
			byKey[k] = append(byKey[k], h)
		}
	}
	var v []string
	at := s.at
	for _, k := range slices.Sorted(mapsKeys(byKey)) {
		hs := byKey[k]
		slices.SortFunc(hs, func(a, b simHolding) int { return a.from.Compare(b.from) })
		for i, b := range hs {
			for _, a := range hs[:i] {
				fenced := a.fence != 0 && b.fence != 0 && !s.forgotBetween(s.fencedFrom(a), b.from)
				switch {
				case a.reader && b.reader, a.token != "" && a.token == b.token:
				case a.from.Before(b.to) && b.from.Before(a.to): // [from, to) intervals meet
					v = append(v, fmt.Sprintf("key %s: %s held it %s–%s, and %s from %s", k, a.who, at(a.from), at(a.to), b.who, at(b.from)))
				case !a.from.Before(a.to) || !b.from.Before(b.to): // an empty holding orders nothing
				case fenced && b.fence == a.fence:
					v = append(v, fmt.Sprintf("key %s: fencing token %d given to %s and %s", k, b.fence, a.who, b.who))
				case fenced && b.fence < a.fence:
					v = append(v, fmt.Sprintf("key %s: %s got token %d at %s, after %s's %d (%s–%s)", k, b.who, b.fence, at(b.from), a.who, a.fence, at(a.from), at(a.to)))
				}
			}
		}
	}
	return v
}

func (s *simRun) at(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(s.begin).Seconds()) }

// outOfOrder lists Lock calls served out of queue order: A took its place
// in a key's queue before B did, and B got the key first, with no fault
// under way from A's place to B's lock, nor a restart guard refusing grants
// (a fault may cost a waiter its place: docs/design.md; a guard, its
// attempt, and with it its place where it was granted). A set's place is
// in each of its keys' queues, so two calls whose keys overlap are served
// in the order they queued; readers of a read-write lock that wait ahead
// of its next writer enter together, in any order. Callers hold s.mu.
func (s *simRun) outOfOrder() []string {
	var v []string
	for _, a := range s.served {
		for _, b := range s.served {
			if overlap(a.keys, b.keys) && !(a.reader && b.reader) && a.queued.Before(b.queued) && b.took.Before(a.took) && !a.guarded && s.calmBetween(a.queued, b.took) {
				v = append(v, fmt.Sprintf("keys %v and %v: %s's waiter queued at %s got %v at %s, after %s's queued at %s got %v at %s", a.keys, b.keys, a.client, s.at(a.queued), a.keys, s.at(a.took), b.client, s.at(b.queued), b.keys, s.at(b.took)))
			}
		}
	}
	return v
}

// overlap reports whether a and b share a key.
func overlap(a, b []string) bool {
	return slices.ContainsFunc(a, func(k string) bool { return slices.Contains(b, k) })
}

// jumped lists acquisitions at an unqueued attempt (a Lock's first, a
// TryLock: the plain SET NX, or a set's script, which reads every key's
// queue) of a key that a Lock call had been waiting for since well before
// the attempt started (its place had reached every node: two node
// timeouts), and went on waiting for, with no fault under way: the
// reservation of a free key for its queue (wire.Reserved) keeps such
// attempts out. Not counted: a holder's re-entry (its own token), a
// restart guard's refusals, and a key left
// to expire (a cooldown's, a holding that ended unreleased) shortly
// before: it is free without a reservation until a waiter's next look,
// within the retry strategy's longest delay (200 ms). On the read-write
// lock's key, a reader may join readers while others wait (the readers
// ahead of a writer enter together), but not while a writer waits; a
// reader is no re-entry. A semaphore's permit ("sem:s") may not be taken
// at a sweep while another waits for one. Callers hold s.mu.
func (s *simRun) jumped() []string {
	var v []string
	settle := s.ttl / 10
	for _, b := range s.direct {
		for _, k := range b.keys {
			// A permit's sweep is the acquire script, which reads each
			// slot's queue: no exclusions.
			switch {
			case k == "sem:s":
			case b.reentry || !slices.Contains(simKeys, k) && k != "rw:d" || s.expiredNear(k, b.queued.Add(-settle-200*time.Millisecond), b.took):
				continue
			}
			i := slices.IndexFunc(s.waits, func(w simWait) bool {
				return slices.Contains(w.keys, k) && !(b.reader && w.reader) && w.from.Add(settle).Before(b.queued) && w.to.After(b.took) && !w.guarded && s.calmBetween(w.from, b.took)
			})
			if i >= 0 {
				w := s.waits[i]
				v = append(v, fmt.Sprintf("key %s: %s took %v at an unqueued attempt %s–%s, while %s had waited for %v since %s (until %s)", k, b.client, b.keys, s.at(b.queued), s.at(b.took), w.who, w.keys, s.at(w.from), s.at(w.to)))
				break
			}
		}
	}
	return v
}

// expiredNear reports whether a holding of key left to expire ended
// within [from, to].
func (s *simRun) expiredNear(key string, from, to time.Time) bool {
	return slices.ContainsFunc(s.holdings, func(h simHolding) bool {
		return slices.Contains(h.keys, key) && h.expires && !h.to.Before(from) && !h.to.After(to)
	})
}

// unreached lists calls that did not reach every node when no fault was
// under way: a lock whose acquire did not run on some node, or a release
// (that Unlock reported done) that did not run on a node where the
// acquire had. Callers hold s.mu.
func (s *simRun) unreached() []string {
	var v []string
	for _, h := range s.holdings {
		if h.token == "" || !s.calmBetween(h.got.Add(-s.ttl), h.got.Add(s.ttl)) {
			continue
		}
		released, ok := s.released[h.token]
		for i, seen := range s.reached {
			switch bits := seen[h.token]; {
			case bits&1 == 0 && !strings.Contains(h.token, ".ri") && !strings.Contains(h.token, ".wi"):
				// (A reader let in by a writer's release, or a writer granted
				// the key by a release, holds by its place's ID, where its
				// place had reached the node before the release: not on a
				// node its look reached after it.)
				v = append(v, fmt.Sprintf("%s's lock from %s (%v): its acquire never ran on node %d", h.who, s.at(h.got), h.keys, i))
			case ok && bits&2 == 0 && s.calmBetween(released.Add(-s.ttl), released.Add(s.ttl)):
				v = append(v, fmt.Sprintf("%s's lock from %s (%v): released at %s, never on node %d", h.who, s.at(h.got), h.keys, s.at(released), i))
			}
		}
	}
	return v
}

// starved lists Lock calls that waited in vain while nobody held their
// keys: with no fault under way, a wait longer than a TTL and a waiter
// lease (a lock given up unreleased lasts a TTL; a place nobody took out,
// a lease) must see a key of its own occupied at some point (see
// occupied), or it was stuck. Callers hold s.mu.
func (s *simRun) starved() []string {
	var v []string
	for _, w := range s.waits {
		if !w.failed || w.guarded || w.to.Sub(w.from) <= s.ttl+defaultWaiterLease || !s.calmBetween(w.from, w.to) {
			continue
		}
		if gaps := s.freeGaps(w, w.to); len(gaps) == 1 && gaps[0].from.Equal(w.from) && gaps[0].to.Equal(w.to) {
			v = append(v, fmt.Sprintf("keys %v: %s waited %s–%s, and nobody held them", w.keys, w.who, s.at(w.from), s.at(w.to)))
		}
	}
	return v
}

// handOffBound is how long a key that somebody waits for may stay free
// once faults have stopped for a waiter lease (no lapsed places are left
// in the queues then), after a holder released it: a lock's key outlives
// its validity by the drift (TTL/100 + 2 ms, nodes' clocks within the
// drift factor) and its acquisition's rounds (up to the node timeout,
// TTL/20); the release names the first waiter, which attempts at once;
// and a hand-off is two rounds. TTL/10 covers all of it. A key left to
// expire (a cooldown's, a holder's that never released it) wakes nobody:
// the first waiter finds it free at its next look, within its retry
// strategy's delay (the default's longest is 200 ms) or the PTTL it saw.
func (s *simRun) handOffBound(after *simHolding) time.Duration {
	if after == nil || after.expires {
		return s.ttl/10 + 200*time.Millisecond
	}
	return s.ttl / 10
}

// slowHandOffs lists Lock calls that, with no fault under way from a
// waiter lease before their call to their return, saw their keys free for
// longer than the hand-off bound: a wait lasts only as long as other
// holders hold a key of its own, or a set that queued before it waits for
// another of its keys (occupied), plus a bound per hand-off. With the
// queue's order (outOfOrder), a waiter with n waiters ahead of it is served
// within their holdings plus n+1 bounds. Callers hold s.mu.
func (s *simRun) slowHandOffs() []string {
	var v []string
	for _, w := range s.waits {
		to := earliest(w.to, s.end)
		if w.guarded || !s.calmBetween(w.from.Add(-defaultWaiterLease), to) {
			continue
		}
		for _, g := range s.freeGaps(w, to) {
			if g.to.After(g.due) {
				v = append(v, fmt.Sprintf("keys %v: %s waited %s–%s, and nobody held them %s–%s (bound %v)", w.keys, w.who, s.at(w.from), s.at(w.to), s.at(g.from), s.at(g.to), g.due.Sub(g.from)))
			}
		}
	}
	return v
}

// simGap is a stretch of time in which a key was free (or, for a stretch
// in which a key was occupied, whose end began the gap after it), and the
// holding that ended when it began (nil if none did). due is when a
// waiter should be served at the latest: for an occupied stretch, a
// hand-off bound after its end (after a holding, as its end allows; after
// a set's wait ahead, a release's: it took the key or left the queue);
// for a free gap, the latest due of the stretches of the busy spell
// before it, or for the gap a wait begins in, of the stretches that
// ended before the wait began (a key left to expire wakes nobody, even if
// a set that waited ahead of the waiter gives up later: simulator seeds
// 84592, and 93602 where the set gave up as the waiter came).
type simGap struct {
	from, to time.Time
	after    *simHolding
	due      time.Time
}

// freeGaps returns the stretches of [w.from, to] in which none of w's keys
// was occupied; callers hold s.mu.
func (s *simRun) freeGaps(w simWait, to time.Time) []simGap {
	if slices.Equal(w.keys, []string{"sem:s"}) {
		// A permit's waiter waits while every slot is occupied: its gaps
		// are those of any slot.
		var gaps []simGap
		for _, slot := range []string{"sem:s:0", "sem:s:1"} {
			gaps = append(gaps, s.freeGaps(simWait{keys: []string{slot}, from: w.from}, to)...)
		}
		return gaps
	}
	var occ []simGap
	var before *simHolding // the last holding of its keys to end before w.from
	var prior time.Time    // the latest due of the stretches that ended by w.from
	for _, k := range w.keys {
		for _, o := range s.occupied(k, w, 0) {
			if !o.to.After(w.from) {
				prior = latest(prior, o.due)
			}
			switch {
			case o.from.Before(to) && o.to.After(w.from):
				occ = append(occ, o)
			case !o.to.After(w.from) && o.after != nil && (before == nil || o.to.After(before.keptUntil())):
				before = o.after
			}
		}
	}
	slices.SortFunc(occ, func(a, b simGap) int { return a.from.Compare(b.from) })
	var gaps []simGap
	g := simGap{from: w.from, after: before} // the gap being measured
	g.due = latest(g.from.Add(s.handOffBound(before)), prior)
	for _, o := range occ {
		if o.from.After(g.from) {
			gaps = append(gaps, simGap{g.from, o.from, g.after, g.due})
			g.due = o.due // a busy spell begins
		}
		if o.to.After(g.from) {
			g.from, g.after = o.to, o.after
		}
		g.due = latest(g.due, o.due)
	}
	if to.After(g.from) {
		gaps = append(gaps, simGap{g.from, to, g.after, g.due})
	}
	return gaps
}

// occupied returns the stretches in which key was occupied for the wait
// w, each with the holding whose end ended it: held (to when its holder
// gave it up), or kept for a set that waited ahead of w (see ahead) for key
// and for another key occupied meanwhile (a set is first in each of its
// keys' queues, and a free key stays Reserved for it while it waits for
// the others), until it may be expected to have seen the other key free
// (the hand-off bound after it was freed; simulator seed 42712: a set
// that waited for a key left to expire looked 187 ms after it expired, as
// its strategy said, and the checker held the waiter behind it to the
// bound after a release). depth bounds the chain of such sets.
func (s *simRun) occupied(key string, w simWait, depth int) []simGap {
	var occ []simGap
	for i := range s.holdings {
		h := &s.holdings[i]
		if slices.Contains(h.keys, key) && h.from.Before(h.keptUntil()) {
			occ = append(occ, simGap{from: h.from, to: h.keptUntil(), after: h, due: h.keptUntil().Add(s.handOffBound(h))})
		}
	}
	if depth == 3 {
		return occ
	}
	for _, set := range s.waits {
		if len(set.keys) < 2 || !slices.Contains(set.keys, key) || !ahead(set, w) || set.who == w.who && set.from.Equal(w.from) {
			continue
		}
		for _, k := range set.keys {
			if k == key {
				continue
			}
			for _, o := range s.occupied(k, set, depth+1) {
				// The set keeps key after k is freed for as long as it may
				// take to see k free (its own wait is checked against that
				// bound): waiters behind it count their gap from then.
				end := earliest(o.to.Add(s.handOffBound(o.after)), set.to)
				if from, to := latest(o.from, set.from), end; from.Before(to) {
					occ = append(occ, simGap{from: from, to: to, after: o.after, due: to.Add(s.ttl / 10)})
				}
			}
		}
	}
	return occ
}

// ahead reports whether the wait a may have queued ahead of the wait b:
// by their tickets when both are known (equal tickets, of two Clients in
// one µs, are ordered by waiter IDs, which the simulator does not keep). A
// ticket is known from an attempt made from the place (Event.Queued); a
// wait that only looked has none, and took its place after its call began
// and before it ended, with a ticket no earlier than its call's start in
// whole µs (a ticket is a µs count: a set that queued at once, in the µs
// of another waiter's ticket, has that ticket and may be ahead, although
// its call began some ns after it; simulator seed 113582).
func ahead(a, b simWait) bool {
	switch {
	case !a.ticket.IsZero() && !b.ticket.IsZero():
		return !a.ticket.After(b.ticket)
	case a.ticket.IsZero() && !b.ticket.IsZero():
		return !inMicros(a.from).After(b.ticket)
	case a.ticket.IsZero():
		return !inMicros(a.from).After(b.to)
	}
	return !a.ticket.After(b.to)
}

// inMicros is t in whole µs, as a ticket taken at t is.
func inMicros(t time.Time) time.Time { return time.UnixMicro(t.UnixMicro()) }

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
