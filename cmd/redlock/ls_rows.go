package main

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redlock-go/redlock"
)

// lsRow is one lock of `redlock ls`: a mutex, a multi-key set (its keys
// held by one token), a read-write lock, a semaphore (its slots folded
// together) or an election.
type lsRow struct {
	Kind    string   `json:"kind"` // mutex, multi-key, rwmutex, semaphore, election
	Name    string   `json:"name"` // as the API takes it (a set: its keys, comma-separated)
	Keys    []string `json:"keys"` // the lock keys it is made of
	Verdict string   `json:"verdict"`
	// Holder is the majority holder's fingerprint (a semaphore: how many
	// slots are held, "3/5"); Metadata its metadata (an election: the
	// leader's value).
	Holder      string `json:"holder,omitempty"`
	Metadata    string `json:"metadata,omitempty"`
	RemainingMs int64  `json:"remaining_ms,omitempty"` // -1: no TTL
	Fence       uint64 `json:"fence,omitempty"`        // the highest fence counter on a node
	Term        uint64 `json:"term,omitempty"`         // an election's
	Waiting     int    `json:"waiting,omitempty"`      // queued Lock calls (the most on a node)
	Readers     int    `json:"readers,omitempty"`      // a read-write lock's live readers (the most on a node)
	Answered    int    `json:"answered"`               // nodes that answered about every key
	Nodes       int    `json:"nodes"`
}

// The verdicts: a majority of nodes name one holder; no holder can have a
// majority whatever the nodes that did not answer hold; or neither.
const (
	verdictHeld    = "held"
	verdictFree    = "free"
	verdictUnknown = "unknown"
)

// verdict is the majority's verdict on one key.
func verdict(s *redlock.KeyState) string {
	if _, _, ok := s.Holder(); ok {
		return verdictHeld
	}
	counts := map[string]int{}
	most, missing := 0, 0
	for _, n := range s.Nodes {
		switch {
		case n.Err != nil:
			missing++
		case n.Held:
			counts[n.Holder]++
			most = max(most, counts[n.Holder])
		}
	}
	if most+missing < len(s.Nodes)/2+1 {
		return verdictFree
	}
	return verdictUnknown
}

// rows groups a listing's keys into locks, in name order.
func rows(l *redlock.Listing) []lsRow {
	var out []lsRow
	sems := map[string][]int{} // semaphore name -> indexes of its slots
	byHolder := map[string][]int{}
	for i, key := range l.Keys {
		switch {
		case strings.HasPrefix(key, "sem:") && strings.LastIndexByte(key, ':') > len("sem:"):
			name := key[len("sem:"):strings.LastIndexByte(key, ':')]
			sems[name] = append(sems[name], i)
		case strings.HasPrefix(key, "rw:"):
			out = append(out, rwRow(key[len("rw:"):], l, i))
		case strings.HasPrefix(key, "election:"):
			out = append(out, electionRow(key[len("election:"):], l, i))
		default:
			if h, _, ok := l.States[i].Holder(); ok {
				byHolder[h] = append(byHolder[h], i)
				continue
			}
			out = append(out, keyRow("mutex", key, l, i))
		}
	}
	for _, idx := range byHolder {
		if len(idx) == 1 {
			out = append(out, keyRow("mutex", l.Keys[idx[0]], l, idx[0]))
			continue
		}
		out = append(out, setRow(l, idx))
	}
	for name, idx := range sems {
		out = append(out, semaphoreRow(name, l, idx))
	}
	slices.SortFunc(out, func(a, b lsRow) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// keyRow is the row of one lock key.
func keyRow(kind, name string, l *redlock.Listing, i int) lsRow {
	s := l.States[i]
	r := lsRow{Kind: kind, Name: name, Keys: []string{l.Keys[i]}, Verdict: verdict(s), Nodes: len(s.Nodes)}
	r.Holder, r.Metadata, _ = s.Holder()
	if r.Verdict == verdictHeld {
		r.RemainingMs = remainingMs(s)
	}
	for _, n := range s.Nodes {
		if n.Err != nil {
			continue
		}
		r.Answered++
		r.Fence = max(r.Fence, n.Fence)
		r.Waiting = max(r.Waiting, n.Waiting)
		r.Readers = max(r.Readers, n.Readers)
	}
	return r
}

func remainingMs(s *redlock.KeyState) int64 {
	if d := s.Remaining(); d != math.MaxInt64 {
		return d.Milliseconds()
	}
	return -1
}

// rwRow: a read-write lock is held by its writer, or by its readers.
func rwRow(name string, l *redlock.Listing, i int) lsRow {
	r := keyRow("rwmutex", name, l, i)
	if r.Verdict == verdictFree && r.Readers > 0 {
		r.Verdict, r.Holder = verdictHeld, strconv.Itoa(r.Readers)+" readers"
	}
	return r
}

// electionRow: the leader's metadata is "TERM.N VALUE", the latest
// announcement among the majority holder's nodes, as Election.Leader reads
// it: one made by the grant ("TERM.1~ VALUE", each node its own counter)
// counts only where a majority of nodes show that term (docs/election.md).
// An unannounced leader shows term 0.
func electionRow(name string, l *redlock.Listing, i int) lsRow {
	r := keyRow("election", name, l, i)
	r.Fence = 0
	s := l.States[i]
	holder, _, _ := s.Holder()
	var term, seq uint64
	for _, n := range s.Nodes {
		t, q, byGrant, value, ok := leaderMeta(n.Metadata)
		if !n.Held || n.Holder != holder || !ok || byGrant && showingTerm(s, holder, t) < len(s.Nodes)/2+1 {
			continue
		}
		if t > term || t == term && q > seq {
			term, seq, r.Metadata = t, q, value
		}
	}
	r.Term = term
	if _, value, ok := strings.Cut(r.Metadata, " "); term == 0 && ok {
		r.Metadata = value
	}
	return r
}

// leaderMeta reads an election's metadata: "TERM.N VALUE", with N followed
// by "~" for an announcement by grant; ok is false for one not announced
// (term 0) or not in that form.
func leaderMeta(meta string) (term, seq uint64, byGrant bool, value string, ok bool) {
	head, value, ok := strings.Cut(meta, " ")
	t, n, ok2 := strings.Cut(head, ".")
	n, byGrant = strings.CutSuffix(n, "~")
	term, err := strconv.ParseUint(t, 10, 64)
	seq, err2 := strconv.ParseUint(n, 10, 64)
	return term, seq, byGrant, value, ok && ok2 && err == nil && err2 == nil && term > 0
}

// showingTerm counts the nodes of s that holder holds with term announced.
func showingTerm(s *redlock.KeyState, holder string, term uint64) int {
	c := 0
	for _, n := range s.Nodes {
		if t, _, _, _, ok := leaderMeta(n.Metadata); n.Held && n.Holder == holder && ok && t == term {
			c++
		}
	}
	return c
}

// setRow is a multi-key set: keys that one token holds on a majority.
func setRow(l *redlock.Listing, idx []int) lsRow {
	r := keyRow("multi-key", "", l, idx[0])
	r.Keys = nil
	for _, i := range idx {
		k := keyRow("mutex", l.Keys[i], l, i)
		r.Keys = append(r.Keys, l.Keys[i])
		r.RemainingMs = minRemaining(r.RemainingMs, k.RemainingMs)
		r.Fence, r.Waiting = max(r.Fence, k.Fence), max(r.Waiting, k.Waiting)
		r.Answered = min(r.Answered, k.Answered)
	}
	r.Name = strings.Join(r.Keys, ",")
	return r
}

// semaphoreRow folds a semaphore's slots together: held when any slot is
// held, unknown when a slot's verdict is, and "N held" slots (of those
// found: a slot never used has no key).
func semaphoreRow(name string, l *redlock.Listing, idx []int) lsRow {
	r := lsRow{Kind: "semaphore", Name: name, Verdict: verdictFree, Nodes: len(l.States[idx[0]].Nodes), Answered: math.MaxInt}
	held := 0
	for _, i := range idx {
		k := keyRow("mutex", l.Keys[i], l, i)
		r.Keys = append(r.Keys, l.Keys[i])
		switch k.Verdict {
		case verdictHeld:
			held++
			r.RemainingMs = minRemaining(r.RemainingMs, k.RemainingMs)
		case verdictUnknown:
			r.Verdict = verdictUnknown
		}
		r.Waiting, r.Answered = max(r.Waiting, k.Waiting), min(r.Answered, k.Answered)
	}
	if held > 0 && r.Verdict != verdictUnknown {
		r.Verdict = verdictHeld
	}
	r.Holder = strconv.Itoa(held) + " held"
	return r
}

// minRemaining is the sooner of two remaining times in ms (0: none yet,
// -1: no TTL).
func minRemaining(a, b int64) int64 {
	switch {
	case a == 0 || a == -1:
		return b
	case b == 0 || b == -1:
		return a
	}
	return min(a, b)
}
