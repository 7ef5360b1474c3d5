package redlock

import (
	"context"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
)

// The simulator's faults: what happens to nodes and Clients, and when.

// simLink is a Client's link to a node, a connection: the node runs its
// calls in the order they were made; it can be cut (calls fail at once)
// or the Client paused between sending and reading (replies come late; the
// node ran the calls on time).
type simLink struct {
	*fakeNode
	cut   *atomic.Bool
	pause *atomic.Int64 // a time.Duration
	lag   *atomic.Int64 // a time.Duration: calls reach the node late
	last  *simLast
	quits *simQuits // the Client's calls in flight, which its queued attempts may end (see simQuits)
	stall *simStall // the Client's replies and notices held (see simStall)
}

// simQuits are a Client's workers' calls in flight that a context ends
// (Lock, TryLock, a campaign), for callers that give up at the worst
// moment: the work's random timeouts end a wait at any time, and so
// seldom while a queued waiter's attempt is in flight that a bug only that
// schedule shows (92fe7ff's: the attempt fails with a minority granted,
// the rest of its grants come after and are given back without waking
// anyone) went unseen in 3,000 seeds. So one queued waiter's attempt in
// quitOdds ends its Client's calls in flight (its own among them) within
// the slowest node's latency of its send, while its grants come in.
type simQuits struct {
	mu    sync.Mutex
	rng   *rand.Rand
	calls map[int]context.CancelFunc
	next  int
	last  *wire.Op      // the attempt seen last (a round starts it on every node)
	slow  time.Duration // the slowest node's latency
	ended int           // attempts during which the calls were ended so
}

// quitOdds is 1 in how many queued waiters' attempts ends its Client's calls.
const quitOdds = 2

// add registers a call's cancel, and returns its removal.
func (q *simQuits) add(cancel context.CancelFunc) (remove func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	id := q.next
	q.next++
	q.calls[id] = cancel
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		delete(q.calls, id)
	}
}

// starting may end the Client's calls in flight soon after o, a queued
// waiter's attempt, is sent.
func (q *simQuits) starting(o *wire.Op) {
	if !wire.IsAcquire(o.Kind) || o.Place == nil || o.Place.ID == "" {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if o == q.last || len(q.calls) == 0 {
		return
	}
	q.last = o
	if q.rng.IntN(quitOdds) != 0 {
		return
	}
	q.ended++
	ids := slices.Sorted(maps.Keys(q.calls))
	cancels := make([]context.CancelFunc, len(ids))
	for i, id := range ids {
		cancels[i] = q.calls[id]
	}
	time.AfterFunc(time.Duration(q.rng.Int64N(int64(q.slow))), func() {
		for _, cancel := range cancels {
			cancel()
		}
	})
}

// simLast is a link's last call, for the next to follow. With
// -sim.perkey (rng set), a call follows only the last call of each of its
// keys (byKey), and travels up to 1 ms more than the link's lag: calls on
// different keys can overtake each other, as on two connections.
type simLast struct {
	mu     sync.Mutex
	done   chan struct{}
	rng    *rand.Rand
	byKey  map[string]chan struct{}
	made   int64 // calls made on the link
	maxRan int64 // the latest made of those run
}

// simOvertakes counts, with -sim.perkey, the calls the links ran, and
// those that ran after a call made later on their link had run: what
// order per key lets happen that order per node did not.
var simOvertakes, simLinkCalls atomic.Int64

// counted numbers a call as made, and returns what to call as it runs,
// which counts it, as overtaken when a call made after it on the link ran
// first. Callers hold l.mu.
func (l *simLast) counted() func() {
	l.made++
	seq := l.made
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		simLinkCalls.Add(1)
		if l.maxRan > seq {
			simOvertakes.Add(1)
		}
		l.maxRan = max(l.maxRan, seq)
	}
}

// afterKeys returns what a call of o waits for, the last calls of its
// keys, and makes it (done) their last. Callers hold l.mu.
func (l *simLast) afterKeys(o *wire.Op, done chan struct{}) <-chan struct{} {
	var prev []chan struct{}
	for _, k := range append([]string{o.Key}, o.Keys...) {
		if p := l.byKey[k]; p != nil && p != done && !slices.Contains(prev, p) { // (a set's Key is in its Keys)
			prev = append(prev, p)
		}
		l.byKey[k] = done
	}
	switch len(prev) {
	case 0:
		return nil
	case 1:
		return prev[0]
	}
	all := make(chan struct{})
	go func() {
		for _, p := range prev {
			<-p
		}
		close(all)
	}()
	return all
}

func (n simLink) Start(c nodeio.Call) {
	n.quits.starting(c.Op)
	if n.cut.Load() {
		go c.To.Deliver(c.Index, wire.Result{Err: errFakeDown})
		return
	}
	n.last.mu.Lock()
	t := turn{after: n.last.done, done: make(chan struct{}), lag: time.Duration(n.lag.Load())}
	if n.last.rng != nil { // order per key (-sim.perkey)
		t.after = n.last.afterKeys(c.Op, t.done)
		t.lag += time.Duration(n.last.rng.Int64N(int64(time.Millisecond)))
		t.run = n.last.counted()
	} else {
		n.last.done = t.done
	}
	n.last.mu.Unlock()
	n.startPaused(c, max(time.Duration(n.pause.Load()), n.stall.late()), t)
}

// StartAll starts a batch's calls in order: the link runs every call in
// the order made.
func (n simLink) StartAll(calls []nodeio.Call) {
	for _, c := range calls {
		n.Start(c)
	}
}

// simSpan is a fault's time, from its start to when it has healed.
type simSpan struct{ from, to time.Time }

// injectFaults injects the run's faults, one at a time at random times,
// until the calm part of the run begins; each heals by itself within about
// 2 TTLs, so the run ends calm.
func (s *simRun) injectFaults(rng *rand.Rand) {
	for {
		time.Sleep(time.Duration(int64(s.ttl/4) + rng.Int64N(int64(s.ttl))))
		if !time.Now().Before(s.calm) {
			return
		}
		s.fault(rng)
	}
}

// fault injects one fault and schedules its end.
func (s *simRun) fault(rng *rand.Rand) {
	d := time.Duration(int64(s.ttl/10) + rng.Int64N(int64(2*s.ttl)))
	i := rng.IntN(len(s.nodes))
	f := s.nodes[i]
	switch rng.IntN(10) {
	case 0: // frozen: calls wait, whatever their context says
		gate := make(chan struct{})
		f.setGate(gate)
		s.logf("node %d frozen for %v", i, d)
		time.AfterFunc(d, func() { f.setGate(nil); close(gate) })
	case 1: // killed, and restarted after at least a TTL with nothing kept
		d = max(d, s.ttl+s.ttl/10)
		f.setErr(errFakeDown)
		s.logf("node %d killed for %v, then restarted empty", i, d)
		time.AfterFunc(d, func() { f.restartMem(false); f.setErr(nil); s.forget(i) })
		d += s.guard() // the restart guard refuses its grants for a while
	case 2: // restarted at once, keys kept (persistence)
		d = s.guard()
		f.restartMem(true)
		s.logf("node %d restarted, keys kept", i)
	case 3: // slow
		f.mu.Lock()
		f.delay = s.ttl / 20
		f.mu.Unlock()
		s.logf("node %d slow for %v", i, d)
		time.AfterFunc(d, func() { f.mu.Lock(); f.delay = s.latency[i]; f.mu.Unlock() })
	case 4: // a clock off by up to half the drift factor more than it was
		rate := s.rates[i] + (rng.Float64()-0.5)*defaultDriftFactor/5
		f.mem.SetClockRate(rate)
		s.logf("node %d clock at %.4f× for %v", i, rate, d)
		time.AfterFunc(d, func() { f.mem.SetClockRate(s.rates[i]) })
	case 5: // a Client cut off from every node
		c := rng.IntN(len(s.cuts))
		s.cuts[c].Store(true)
		s.logf("client %d cut off for %v", c, d)
		time.AfterFunc(d, func() { s.cuts[c].Store(false) })
	case 6: // restarted at once with nothing kept: safe where every Client knows the node (the restart guard)
		d = s.guard() // and the queue's places come back with the waiters' refreshes
		if !s.guarded(i) {
			f.restartMem(true)
			s.logf("node %d restarted, keys kept (a Client does not know it yet)", i)
			break
		}
		f.restartMem(false)
		s.forget(i)
		s.logf("node %d restarted empty, at once", i)
	case 7: // a Client paused between sending its calls and reading the replies, within the node timeout (TTL/20) mostly
		c, p := rng.IntN(len(s.pauses)), time.Duration(int64(s.ttl/100)+rng.Int64N(int64(s.ttl/20)))
		s.pauses[c].Store(int64(p))
		s.logf("client %d reads replies %v late, for %v", c, p, d)
		time.AfterFunc(d, func() { s.pauses[c].Store(0) })
		d += p
	case 8: // a Client's link to a node loses packets: calls arrive late, some after their deadline, and run
		c, lag := rng.IntN(len(s.lags)), time.Duration(int64(s.ttl/100)+rng.Int64N(int64(s.ttl/10)))
		s.lags[c][i].Store(int64(lag))
		s.logf("client %d's calls reach node %d %v late, for %v", c, i, lag, d)
		time.AfterFunc(d, func() { s.lags[c][i].Store(0) })
		d += lag
	case 9: // a Client's connections stall downstream: its calls run, their replies and its notices (or its notices alone) come late
		c, p := rng.IntN(len(s.stalls)), time.Duration(int64(s.ttl/20)+rng.Int64N(int64(s.ttl)))
		if rng.IntN(2) == 0 { // its subscriptions alone: replies on time, notices late
			s.stalls[c].holdNotices(time.Now().Add(p))
			s.logf("client %d hears no notice for %v (replies still come)", c, p)
		} else {
			s.stalls[c].hold(time.Now().Add(p))
			s.logf("client %d hears nothing for %v (its calls still run)", c, p)
		}
		d = p
	}
	s.mu.Lock()
	s.spans = append(s.spans, faultSpan(time.Now(), d))
	if h := time.Now().Add(d); h.After(s.healed) {
		s.healed = h
	}
	s.mu.Unlock()
}

// faultSpan is the stretch in which a fault that began at start and
// lasted d may still show in the wait queues: a waiter that could not
// refresh its place, or take it out, puts it back or loses it at its next
// refresh (every lease/3), and a place nobody took out (its waiter gave
// up while cut off) lapses a lease after its last refresh, which came
// before the fault began at the latest. Until 2026-11-27 the span ended
// d + lease/2 after start, which a fault shorter than lease/2 left before
// such a lapse: simulator seed 126807 (a Client cut off for 333 ms; the
// place of its waiter that gave up lapsed 1 s after the cut, and an
// unqueued attempt took the key in that instant, ahead of the waiters
// behind the lapsed place, who learn of it at their next look).
func faultSpan(start time.Time, d time.Duration) simSpan {
	return simSpan{start, latest(start.Add(d+defaultWaiterLease/2), start.Add(defaultWaiterLease))}
}

// guard is how long the Clients' restart guard refuses a restarted
// node's grants (the default: the Client's TTL), and a little more.
func (s *simRun) guard() time.Duration { return s.ttl + s.ttl/10 }

// forget notes that node i restarted empty: its locks and fencing
// counters forgotten.
func (s *simRun) forget(i int) {
	s.mu.Lock()
	s.forgot = append(s.forgot, time.Now())
	s.emptied[i] = append(s.emptied[i], time.Now())
	s.mu.Unlock()
}

// guarded reports whether every Client's restart guard knows node i, so
// that its restart with nothing kept is seen by all.
func (s *simRun) guarded(i int) bool {
	for _, c := range s.clients {
		if c.guard.nodes[i].Load().id == "" {
			return false
		}
	}
	return true
}

// guardedSince reports whether some Client's restart guard has refused a
// node's grants at any time since from.
func (s *simRun) guardedSince(from time.Time) bool {
	for _, c := range s.clients {
		for i := range c.guard.nodes {
			if c.guard.nodes[i].Load().until.After(from) {
				return true
			}
		}
	}
	return false
}

// calmBetween reports whether no fault was under way at any time from
// from to to; callers hold s.mu.
func (s *simRun) calmBetween(from, to time.Time) bool {
	for _, sp := range s.spans {
		if !sp.to.Before(from) && !sp.from.After(to) {
			return false
		}
	}
	return true
}
