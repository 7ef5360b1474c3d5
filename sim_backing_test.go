package redlock

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// The backing check: a Lock is the nodes' state, not the Client's belief.
// While a holder's Lock is valid, each of its keys is held for its token
// on a majority of nodes, as each node itself sees it (a mutex's key, a
// writer's, a set's, a semaphore's slot or an election's key set to the
// token, with the Lock's metadata where it has some, but an election's,
// whose metadata the nodes announce; a reader's token among the key's
// live readers). A node that
// restarted empty since the winning attempt started counts as backing
// it: the restart guard keeps its grants out (the overlap check sees
// where it does not).
//
// The overlap check needs a second holder to meet the first; this one
// needs none: a Client that holds by grants its own calls have taken
// back (the reader's attempt that took its let-ins over, the read-write
// lock's bug TestChaosRWMutex found in CI on 2026-12-03) is seen the
// moment its Lock returns, whether or not a writer comes along in time.

// checkBacked notes, as a violation, each key of l (held by who) that
// fewer than a majority of nodes hold for l's token now, while l is
// valid and its holder has not yet released it.
func (s *simRun) checkBacked(who string, l *Lock) {
	now := time.Now()
	if _, ended := l.endState(); ended || !now.Before(s.end) || !now.Before(l.validUntil()) {
		return // (Close releases every lock at the end)
	}
	keys := l.rkeys // a set's
	if keys == nil {
		keys = []string{l.rkey}
	}
	meta := l.cfg.meta
	if l.mode == wire.ModeElection {
		meta = "" // (its leader's term and value: Election's checks)
	}
	for _, k := range keys {
		backed, seen := 0, make([]string, len(s.nodes))
		for i, f := range s.nodes {
			ok, what := holds(f, k, l.Token(), meta, l.reader())
			if !ok && s.emptiedSince(i, l.acquired) {
				ok, what = true, "restarted empty"
			}
			if ok {
				backed++
			}
			seen[i] = what
		}
		if backed < quorum(len(s.nodes)) {
			s.mu.Lock()
			s.unbacked = append(s.unbacked, fmt.Sprintf("%s: %s valid until %s held by %d of %d nodes at %s (token %q; the nodes: %s)",
				who, k, s.at(l.validUntil()), backed, len(s.nodes), s.at(now), l.Token(), strings.Join(seen, "; ")))
			s.mu.Unlock()
		}
	}
}

// holds reports whether node f holds key k for token (a reader's: among
// k's readers, until a time later than the node's now), with meta if not
// "", and what it has.
func holds(f *fakeNode, k, token, meta string, reader bool) (bool, string) {
	if reader {
		score, ok := f.mem.Do("ZSCORE", k+":readers", token).(string)
		if !ok {
			return false, "not a reader"
		}
		lapse, _ := strconv.ParseInt(score, 10, 64)
		now := nodeNowMs(f)
		return lapse > now, fmt.Sprintf("a reader until %d ms, now %d", lapse, now)
	}
	v, ok := f.mem.Do("GET", k).(string)
	if !ok {
		return false, "no key"
	}
	if meta != "" {
		return v == token+"\x00"+meta || v == token+wire.Queued+meta, fmt.Sprintf("%q", v)
	}
	return v == token || strings.HasPrefix(v, token+"\x00"), fmt.Sprintf("%q", v)
}

// nodeNowMs is node f's clock, in ms.
func nodeNowMs(f *fakeNode) int64 {
	tm, _ := f.mem.Do("TIME").([]any)
	if len(tm) != 2 {
		return 0
	}
	sec, _ := strconv.ParseInt(fmt.Sprint(tm[0]), 10, 64)
	usec, _ := strconv.ParseInt(fmt.Sprint(tm[1]), 10, 64)
	return sec*1000 + usec/1000
}

// emptiedSince reports whether node i restarted empty at or after t.
func (s *simRun) emptiedSince(i int, t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, at := range s.emptied[i] {
		if !at.Before(t) {
			return true
		}
	}
	return false
}
