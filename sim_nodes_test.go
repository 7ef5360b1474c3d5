package redlock

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// setUpNodes makes the run's nodes: each takes a while to answer, as a
// real one does (with instant answers a round lasts no time, and a retry
// paced in rounds, a split vote's, would spin), and in half the runs every
// clock runs fast, by up to 0.9 of the drift factor (keys expire early),
// in the others each runs fast or slow by up to as much.
func (s *simRun) setUpNodes(rng *rand.Rand) {
	s.nodes = newFakeNodes(3 + 2*rng.IntN(3))
	s.emptied = make([][]time.Time, len(s.nodes))
	allFast := rng.IntN(2) == 0
	for i, f := range s.nodes {
		s.latency = append(s.latency, time.Duration(50+rng.IntN(950))*time.Microsecond)
		f.delay = s.latency[i]
		rate := 1 + (2*rng.Float64()-1)*0.9*defaultDriftFactor
		if allFast {
			rate = 1 + rng.Float64()*0.9*defaultDriftFactor
		}
		if s.mutant.clock != 0 {
			rate = s.mutant.clock
		}
		s.rates = append(s.rates, rate)
		f.mem.SetClockRate(rate)
		s.reached = append(s.reached, map[string]uint8{})
		f.ran = s.ran(i)
		s.mutant.applyNode(f)
	}
}

// ran notes, for node i, the tokens its acquires and releases ran for.
func (s *simRun) ran(i int) func(*wire.Op) {
	return func(o *wire.Op) {
		if *simHistory {
			s.note(i, o)
		}
		bit := uint8(0)
		switch {
		case wire.IsAcquire(o.Kind):
			bit = 1
		case o.Kind == wire.OpRelease:
			bit = 2
		default:
			return
		}
		s.mu.Lock()
		s.reached[i][o.Token] |= bit
		s.mu.Unlock()
	}
}

// coolingDown reports whether key k on node f is nothing a Client left
// behind: a token released with a cooldown that has not ended (give or
// take the node's clock), or a sorted set whose live members are all such
// (a read-write lock's readers) or none (a wait queue's places: the lease
// of each, by node time, has run out), or a key reserved for its queue
// (wire.Reserved), or granted to a place by a release (its waiter, cut
// off, could not release it: simulator seed 7890), or a waiting set's list
// of its keys (KEY:set:PLACE, written by its looks for as long as the place
// lives: seed 525, a place gone from the queue before its list), or a
// waiting candidate's value (KEY:val:PLACE, the same way), that expires
// no later than such a place.
func (s *simRun) coolingDown(f *fakeNode, k string) bool {
	var tokens []string
	v, ok := f.value(k)
	token, _, _ := strings.Cut(v, "\x00")
	if ok && (wire.IsReserved(v) || isGrantee(token) || strings.Contains(k, "}:set:") || strings.Contains(k, "}:val:")) {
		pttl, _ := f.mem.Do("PTTL", k).(int64)
		if s.nodeMs(f)+pttl <= s.placesLapsed(f) {
			return true
		}
	}
	if wire.IsReserved(v) {
		return false
	} else if ok {
		tokens = append(tokens, token)
	} else {
		leases := k
		if q, ok := strings.CutSuffix(k, ":queue"); ok {
			leases = q + ":lease"
		}
		live := s.nodeMs(f)
		if !strings.HasSuffix(k, ":readers") {
			live = s.placesLapsed(f)
		}
		members, _ := f.mem.Do("ZRANGE", leases, 0, -1, "WITHSCORES").([]any)
		for j := 0; j+1 < len(members); j += 2 {
			if until, _ := strconv.ParseInt(members[j+1].(string), 10, 64); until > live {
				tokens = append(tokens, members[j].(string))
			}
		}
		if len(tokens) == 0 {
			return true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, token := range tokens {
		until, ok := s.cooldowns[token]
		if !ok || !time.Now().Before(until.Add(drift(s.ttl, defaultDriftFactor))) {
			return false
		}
	}
	return true
}

// nodeMs is node f's time, in ms, as its scripts read it.
func (s *simRun) nodeMs(f *fakeNode) int64 {
	now := f.mem.Do("TIME").([]any)
	sec, _ := strconv.ParseInt(now[0].(string), 10, 64)
	us, _ := strconv.ParseInt(now[1].(string), 10, 64)
	return sec*1000 + us/1000
}

// placesLapsed is the node time (ms) by which every place left in a queue
// must have lapsed: a place refreshed last before the last fault healed
// may be one its waiter could not take out, and it lapses within a lease.
func (s *simRun) placesLapsed(f *fakeNode) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nodeMs(f) + (time.Until(s.healed) + defaultWaiterLease + defaultWaiterLease/50).Milliseconds()
}
