package integration

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// holding is one holder's claim: from Lock returning to the earlier of
// Unlock being called and the lock's validity ending.
type holding struct {
	worker        string
	started, from time.Time // Lock called; Lock returned
	to            time.Time
	fence         uint64
}

// checker collects holdings and writes, and finds violations.
type checker struct {
	mu       sync.Mutex
	holdings []holding
	stale    []string // writes a store accepted from a holder a newer token had superseded
}

func (c *checker) record(h holding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdings = append(c.holdings, h)
}

// violations lists every overlap of two holdings, every token that is not
// larger than that of a holding that ended before the next began, and every
// stale write.
func (c *checker) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	hs := slices.Clone(c.holdings)
	sort.Slice(hs, func(i, j int) bool { return hs[i].from.Before(hs[j].from) })
	var v []string
	for i := 1; i < len(hs); i++ {
		for j := i - 1; j >= 0 && j >= i-8; j-- { // holders are short; near neighbours suffice
			a, b := hs[j], hs[i]
			if b.from.Before(a.to) {
				v = append(v, fmt.Sprintf("overlap: %s held %v–%v, %s from %v", a.worker, a.from.Format("15:04:05.000000"), a.to.Format("15:04:05.000000"), b.worker, b.from.Format("15:04:05.000000")))
			}
			if a.fence != 0 && b.fence != 0 && !a.from.After(b.started) && b.fence <= a.fence && a.to.Before(b.started) {
				v = append(v, fmt.Sprintf("token order: %s got %d after %s's %d", b.worker, b.fence, a.worker, a.fence))
			}
		}
	}
	seen := map[uint64]string{}
	for _, h := range hs {
		if h.fence == 0 {
			continue
		}
		if w, dup := seen[h.fence]; dup {
			v = append(v, fmt.Sprintf("token %d given to %s and %s", h.fence, w, h.worker))
		}
		seen[h.fence] = h.worker
	}
	return append(v, c.stale...)
}

// store is the resource the holders write to. Fenced, it refuses a token
// lower than one it has accepted; unfenced, it takes every write, and a
// write from a token lower than one already written is a stale write the
// checker counts.
type store struct {
	mu       sync.Mutex
	fenced   bool
	highest  uint64
	rejected int // stale writes a fenced store refused
	c        *checker
}

// newerThan reports whether a token above fence has been written.
func (s *store) newerThan(fence uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.highest > fence
}

func (s *store) write(worker string, fence uint64) (accepted bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence < s.highest {
		if s.fenced {
			s.rejected++
			return false
		}
		s.c.mu.Lock()
		s.c.stale = append(s.c.stale, fmt.Sprintf("stale write: %s wrote with token %d after %d", worker, fence, s.highest))
		s.c.mu.Unlock()
		return true
	}
	s.highest = fence
	return true
}
