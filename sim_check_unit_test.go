package redlock

import (
	"strings"
	"testing"
	"time"
)

// The checker's hand-off bound where a waiter queued behind a set, built
// from simulator seed 42712 (TTL 536 ms, so a release's bound is 53.6 ms
// and a key left to expire's 253.6 ms). A set S on {a, b} is first on
// both; b's holder leaves b to expire; S sees b free at its next look, 187
// ms later (its strategy's pace: a key left to expire wakes nobody), and
// takes {a, b}. W, on {c, a}, is behind S on a; c is released 133 ms
// after b's expiry, and W waits until S has had a and released it.
func TestCheckerWaitBehindSet(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	run := func(sTook, wTook time.Duration) []string {
		begin := time.Unix(1000, 0)
		at := func(d time.Duration) time.Time { return begin.Add(d) }
		s := &simRun{begin: begin, ttl: ms(536), end: at(ms(3000))}
		s.holdings = []simHolding{
			{keys: []string{"b"}, who: "B", from: at(ms(100)), to: at(ms(910)), expires: true},
			{keys: []string{"c"}, who: "C", from: at(ms(500)), to: at(ms(1043))},
			{keys: []string{"a", "b"}, who: "S", from: at(sTook), to: at(sTook + ms(92))},
			{keys: []string{"c", "a"}, who: "W", from: at(wTook), to: at(wTook + ms(50))},
		}
		s.waits = []simWait{
			{keys: []string{"a", "b"}, who: "S", from: at(ms(714)), to: at(sTook), ticket: at(ms(715))},
			{keys: []string{"c", "a"}, who: "W", from: at(ms(964)), to: at(wTook), ticket: at(ms(965))},
		}
		return s.slowHandOffs()
	}
	if v := run(ms(1108), ms(1210)); len(v) != 0 {
		t.Errorf("W served 10 ms after S released a, S late only within its own bound: flagged\n%s", strings.Join(v, "\n"))
	}
	// W still answers for its own gap once S is done with a.
	v := run(ms(1108), ms(1200)+ms(54))
	if len(v) != 1 || !strings.Contains(v[0], "W waited") {
		t.Errorf("W served 54 ms after S released a (bound 53.6 ms): want W flagged, got %q", v)
	}
	// And S for its own: b free from 910 ms, S may take it until 1163.6 ms;
	// W, behind it, is not blamed for S's delay.
	v = run(ms(1165), ms(1267))
	if len(v) != 1 || !strings.Contains(v[0], "S waited") {
		t.Errorf("S took {a, b} 255 ms after b expired (bound 253.6 ms): want S flagged, got %q", v)
	}
}

// The checker's hand-off bound where a key left to expire is free under a
// set that waited ahead and gave up later, built from simulator seed 84592
// (TTL 586 ms: bounds 58.6 ms after a release, 258.6 ms after an expiry).
// A set H on {b, c} releases with a 24 ms cooldown; W1, first on c, is
// woken by nothing and sees c free at its next look, 108 ms after the
// expiry. S, a set on {a, c} whose ticket comes after W1's and before W's,
// waits for a and gives up 14 ms after the expiry; W, on c behind both, is
// not held to the bound after S's wait.
func TestCheckerExpiryUnderASetAhead(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	run := func(w1Took time.Duration) []string {
		begin := time.Unix(1000, 0)
		at := func(d time.Duration) time.Time { return begin.Add(d) }
		s := &simRun{begin: begin, ttl: ms(586), end: at(ms(3000))}
		s.holdings = []simHolding{
			{keys: []string{"b", "c"}, who: "H", from: at(ms(189)), to: at(ms(482)), expires: true},
			{keys: []string{"b", "c"}, who: "H(cooldown)", from: at(ms(482)), to: at(ms(506)), expires: true},
			{keys: []string{"a"}, who: "A", from: at(ms(188)), to: at(ms(1000))},
			{keys: []string{"c"}, who: "W1", from: at(w1Took), to: at(w1Took + ms(200))},
		}
		s.waits = []simWait{
			{keys: []string{"c"}, who: "W1", from: at(0), to: at(w1Took), ticket: at(ms(1))},
			{keys: []string{"a", "c"}, who: "S", from: at(ms(137)), to: at(ms(520)), ticket: at(ms(138)), failed: true},
			{keys: []string{"c"}, who: "W", from: at(ms(392)), to: at(w1Took + ms(250)), ticket: at(ms(393))},
		}
		return s.slowHandOffs()
	}
	if v := run(ms(614)); len(v) != 0 {
		t.Errorf("c free 108 ms after it expired, under the 258.6 ms bound: flagged\n%s", strings.Join(v, "\n"))
	}
	v := run(ms(506 + 259))
	if len(v) == 0 || !strings.Contains(v[0], "W1 waited") {
		t.Errorf("W1 served 259 ms after c expired: want it flagged, got %q", v)
	}
}

// As TestCheckerExpiryUnderASetAhead, where the set ahead gives up as the
// waiter's wait begins, built from simulator seed 93602 (TTL 341 ms: 34.1
// ms after a release, 234.1 ms after an expiry). A set H on {b, c}
// releases with a 2 ms cooldown; W1, first on c, sees c free 57 ms after
// it expired. S, a set on {a, b} ahead of W, waits for a and gives up at
// the instant W, a set on {b, c}, begins to wait.
func TestCheckerExpiryBeforeTheWait(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	run := func(w1Took time.Duration) []string {
		begin := time.Unix(1000, 0)
		at := func(d time.Duration) time.Time { return begin.Add(d) }
		s := &simRun{begin: begin, ttl: ms(341), end: at(ms(3000))}
		s.holdings = []simHolding{
			{keys: []string{"b", "c"}, who: "H", from: at(ms(1)), to: at(ms(171)), expires: true},
			{keys: []string{"b", "c"}, who: "H(cooldown)", from: at(ms(171)), to: at(ms(173)), expires: true},
			{keys: []string{"a"}, who: "A", from: at(ms(1)), to: at(ms(307))},
			{keys: []string{"c"}, who: "W1", from: at(w1Took), to: at(w1Took + ms(86))},
		}
		s.waits = []simWait{
			{keys: []string{"c"}, who: "W1", from: at(ms(1)), to: at(w1Took), ticket: at(ms(2))},
			{keys: []string{"a", "b"}, who: "S", from: at(ms(1)), to: at(ms(196)), ticket: at(ms(1)), failed: true},
			{keys: []string{"b", "c"}, who: "W", from: at(ms(196)), to: at(w1Took + ms(87)), ticket: at(ms(196))},
		}
		return s.slowHandOffs()
	}
	if v := run(ms(231)); len(v) != 0 {
		t.Errorf("c free 58 ms after it expired, under the 234.1 ms bound: flagged\n%s", strings.Join(v, "\n"))
	}
	v := run(ms(173 + 235))
	if len(v) == 0 || !strings.Contains(v[0], "W1 waited") {
		t.Errorf("W1 served 235 ms after c expired: want it flagged, got %q", v)
	}
}

// A set that queued in the same µs as the waiter behind it, built from
// simulator seed 113582 (TTL 1.678 s: 167.8 ms after a release). W waits
// for a, and takes its place at 13.169781 s; S, a set on {a, b}, begins in
// that µs, 400 ns later, and queues at once: the same ticket, ahead of W by
// its waiter ID, so a is kept for S while b is held. S only looked (its
// ticket is unknown) and gives up when b is released; W takes a then. The
// checker compared S's start, in ns, with W's ticket, in whole µs, found S
// behind W, and flagged a free for 635 ms.
func TestCheckerSetAheadInTheSameMicrosecond(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	run := func(sFrom time.Duration) []string {
		begin := time.Unix(1000, 0)
		at := func(d time.Duration) time.Time { return begin.Add(d) }
		s := &simRun{begin: begin, ttl: ms(1678), end: at(ms(16780))}
		s.holdings = []simHolding{
			{keys: []string{"a"}, who: "A", from: at(ms(12369)), to: at(ms(13879))},
			{keys: []string{"b"}, who: "B", from: at(ms(13170)), to: at(ms(14512))},
			{keys: []string{"a"}, who: "W", from: at(ms(14515)), to: at(ms(14935))},
		}
		s.waits = []simWait{
			{keys: []string{"a"}, who: "W", from: at(ms(13169)), to: at(ms(14515)), ticket: at(13169781 * time.Microsecond)},
			{keys: []string{"a", "b"}, who: "S", from: at(sFrom), to: at(ms(14514)), failed: true},
		}
		return s.slowHandOffs()
	}
	if v := run(13169781*time.Microsecond + 400); len(v) != 0 {
		t.Errorf("S queued in W's µs, so may be ahead of it: flagged\n%s", strings.Join(v, "\n"))
	}
	v := run(13169782 * time.Microsecond)
	if len(v) == 0 || !strings.Contains(v[0], "W waited") {
		t.Errorf("S began in the µs after W's ticket, so queued behind it: want W flagged, got %q", v)
	}
}

// A short fault's span covers the lapse of a place its waiter could not
// take out, a lease after the fault began (simulator seed 126807: a Client
// cut off for 333 ms at 0.878 s, a place lapsing at 1.877 s, and an
// unqueued attempt taking the key in that instant).
func TestCheckerFaultSpanCoversALapse(t *testing.T) {
	begin := time.Unix(1000, 0)
	ms := func(n int) time.Time { return begin.Add(time.Duration(n) * time.Millisecond) }
	s := &simRun{begin: begin, spans: []simSpan{faultSpan(ms(878), 333*time.Millisecond)}}
	if s.calmBetween(ms(1742), ms(1877)) {
		t.Errorf("a place left by the cut-off Client lapses at 1.877 s: calm then")
	}
	if !s.calmBetween(ms(1879), ms(2000)) {
		t.Errorf("calm not back a lease after the fault began")
	}
	long := &simRun{begin: begin, spans: []simSpan{faultSpan(ms(0), 2*time.Second)}}
	if long.calmBetween(ms(2400), ms(2499)) {
		t.Errorf("a long fault's span ends before lease/2 after it")
	}
}

// A node that restarted empty after it granted a fencing token forgets
// it, even in the instant before the holder's call returned (simulator
// seed 214922: a term granted at 8.299 s, the node restarted empty at
// 8.302 s, Campaign returned just after; a later leader's smaller
// proposal was taken by that node and one that restarted earlier, a
// majority of 3). The checker does not compare the two tokens; it does
// where the restart came before the first holder's attempt could begin.
func TestCheckerForgetAfterTheGrant(t *testing.T) {
	begin := time.Unix(1000, 0)
	ms := func(n int) time.Time { return begin.Add(time.Duration(n) * time.Millisecond) }
	run := func(forgot time.Time) []string {
		s := &simRun{begin: begin, ttl: 1700 * time.Millisecond, forgot: []time.Time{forgot}}
		s.holdings = []simHolding{
			{keys: []string{"election:e"}, who: "A", fence: 10, got: ms(8302), from: ms(8302), to: ms(8982)},
			{keys: []string{"election:e"}, who: "B", fence: 5, got: ms(12915), from: ms(12915), to: ms(13500)},
		}
		return s.overlaps()
	}
	if v := run(ms(8301)); len(v) != 0 {
		t.Errorf("a node restarted empty after A's grant, before A's call returned: flagged\n%s", strings.Join(v, "\n"))
	}
	if v := run(ms(8302 - 1701)); len(v) != 1 || !strings.Contains(v[0], "after A") {
		t.Errorf("a restart before A's attempt could begin forgets nothing of A's: want B flagged, got %q", v)
	}
}
