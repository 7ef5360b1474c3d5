package redlock

import (
	"fmt"
	"slices"
	"time"
)

// staleReads lists Election.Leader answers that contradict the
// leaderships around them: a read made entirely while a leader was
// announced and valid (Lead's work started before the read, and found
// its context live after it) must name that leader's term, unless a node
// restarted empty meanwhile (the leader may then hold fewer than a
// majority of nodes: the restart guard still keeps others out until its
// validity ends, but a read sees no leader); and no read
// that began after a leader was announced may name an older term. (These
// are real-time orders between operations that do not overlap, checked
// directly; the fence counter's own model, a strictly increasing counter,
// is checked the same way in overlaps.) Callers hold s.mu.
func (s *simRun) staleReads() []string {
	var v []string
	for _, r := range s.reads {
		for _, h := range s.holdings {
			if !slices.Equal(h.keys, []string{"election:e"}) || !h.from.Before(r.call) {
				continue
			}
			switch {
			case h.to.After(r.ret) && (r.none || r.term != h.fence) && !s.forgotBetween(h.from, r.ret):
				v = append(v, fmt.Sprintf("%s's Leader read %s–%s found term %d (none: %v) while %s led in term %d (%s–%s)", r.who, s.at(r.call), s.at(r.ret), r.term, r.none, h.who, h.fence, s.at(h.from), s.at(h.to)))
			case !r.none && r.term < h.fence && !s.forgotBetween(h.from, r.ret):
				v = append(v, fmt.Sprintf("%s's Leader read %s–%s found term %d, older than %s's term %d announced at %s", r.who, s.at(r.call), s.at(r.ret), r.term, h.who, h.fence, s.at(h.from)))
			}
		}
	}
	return v
}

// unobserved lists what Election.Observe got wrong: a leader (term, then
// value) older than one it gave before; or, with no fault under way, a
// leader announced while it ran that it did not give within TTL/2 and a
// tenth (its poll's period, and a round) although the leader still led
// then. Callers hold s.mu.
func (s *simRun) unobserved() []string {
	var v []string
	bound := s.ttl/2 + s.ttl/10
	for _, o := range s.observers {
		for i := 1; i < len(o.seen); i++ {
			a, b := o.seen[i-1], o.seen[i]
			if b.term < a.term || b.term == a.term && b.seq < a.seq {
				v = append(v, fmt.Sprintf("%s observed term %d.%d at %s after %d.%d at %s", o.who, b.term, b.seq, s.at(b.at), a.term, a.seq, s.at(a.at)))
			}
		}
		for _, h := range s.holdings {
			due := h.from.Add(bound)
			if !slices.Equal(h.keys, []string{"election:e"}) || h.from.Before(o.from) || due.After(o.to) || h.to.Before(due) || !s.calmBetween(h.from, due) {
				continue
			}
			if !slices.ContainsFunc(o.seen, func(x simSeen) bool { return x.term >= h.fence && !x.at.After(due) }) {
				v = append(v, fmt.Sprintf("%s observing %s–%s never saw %s's term %d, announced at %s, by %s", o.who, s.at(o.from), s.at(o.to), h.who, h.fence, s.at(h.from), s.at(due)))
			}
		}
	}
	return v
}

// fencedFrom is the earliest a node can have handed out h's fencing
// token: its winning attempt began less than a TTL before its Lock call
// returned (the lock's validity was still positive). A node that restarted
// empty after granting it, even before the call returned, has forgotten
// it (simulator seed 214922, 3 nodes: one restarted empty in the ms
// between its grant of a term and Campaign's return, another had
// restarted before, and a later leader's smaller proposal was taken by
// both; until 2026-11-27 the checker counted restarts from the call's
// return).
func (s *simRun) fencedFrom(h simHolding) time.Time {
	got := h.got
	if got.IsZero() {
		got = h.from
	}
	return got.Add(-s.ttl)
}

// forgotBetween reports whether a node restarted empty between from and
// to; callers hold s.mu.
func (s *simRun) forgotBetween(from, to time.Time) bool {
	for _, t := range s.forgot {
		if !t.Before(from) && !t.After(to) {
			return true
		}
	}
	return false
}
