package redlock

import (
	"fmt"
	"slices"
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
	byKey := map[string][]simHolding{}
	for _, h := range s.holdings {
		for _, k := range h.keys {
			byKey[k] = append(byKey[k], h)
		}
	}
	var v []string
	at := func(t time.Time) string { return fmt.Sprintf("%.3fs", t.Sub(s.begin).Seconds()) }
	for _, k := range slices.Sorted(mapsKeys(byKey)) {
		hs := byKey[k]
		slices.SortFunc(hs, func(a, b simHolding) int { return a.from.Compare(b.from) })
		for i, b := range hs {
			for _, a := range hs[:i] {
				fenced := a.fence != 0 && b.fence != 0 && !s.forgotBetween(a.from, b.from)
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

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
