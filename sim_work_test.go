package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// The simulator's workloads: what a worker does.

// simKeys are the keys workers contend for.
var simKeys = []string{"a", "b", "c"}

// work is one worker: until the run's end, it takes a lock one way or
// another (a key alone, with Lock, TryLock or Do; two keys at once; a
// read-write lock's either side; a semaphore's permit; an election's
// leadership), holds it for a while, and releases it. A wait has a
// timeout, cancelled as soon as the wait is over (ctx, cancel :=
// context.WithTimeout(…); l, err := c.Lock(ctx); cancel()).
func (s *simRun) work(c *Client, who string, rng *rand.Rand) {
	for time.Now().Before(s.end) {
		key := simKeys[rng.IntN(len(simKeys))]
		var opts []Option
		if rng.IntN(3) == 0 {
			opts = append(opts, WithFencing())
		}
		hold := time.Duration(rng.Int64N(int64(s.ttl)))
		keyOpts := opts // but a read-write lock's: with metadata half the time (by a draw made anyway: no seed's draws move)
		if hold%2 == 1 {
			keyOpts = append(slices.Clip(opts), WithMetadata(who))
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.Int64N(int64(3*s.ttl))))
		unregister := s.quitsOf(c).add(cancel)
		ticket := new(time.Time) // the Lock call's place, once it has one (the observer's)
		ctx = context.WithValue(ctx, simTicket{}, ticket)
		got := func(who string, l *Lock, err error, reader bool) {
			cancel()
			s.holdFor(who, l, err, reader, hold, rng)
		}
		choice := rng.IntN(10)
		if s.mutant.rw && rng.IntN(3) != 0 {
			choice = 6
		}
		switch choice {
		case 0, 1:
			s.doWork(c, who, key, hold, keyOpts)
		case 2:
			l, err := c.TryLock(ctx, key, keyOpts...)
			got(who, l, err, false)
		case 3, 4:
			from := time.Now()
			l, err := c.Lock(ctx, key, keyOpts...)
			s.noteWait([]string{key}, who, false, from, *ticket, err)
			if err == nil && rng.IntN(4) == 0 { // the holder re-enters: the same token, the TTL refreshed
				if again, err := c.TryLock(context.WithValue(ctx, simReentry{}, true), key, append(keyOpts, WithToken(l.Token()))...); err == nil {
					got(who+"(again)", again, nil, false)
					break
				}
			}
			got(who, l, err, false)
		case 5:
			other := simKeys[(slices.Index(simKeys, key)+1+rng.IntN(len(simKeys)-1))%len(simKeys)]
			if m, err := c.MultiLock([]string{key, other}, keyOpts...); err == nil {
				from := time.Now()
				l, err := m.Lock(ctx)
				s.noteWait([]string{key, other}, who+"(set)", false, from, *ticket, err)
				got(who+"(set)", l, err, false)
			}
		case 6:
			m, err := c.RWMutex("d", opts...)
			from := time.Now()
			if err == nil && rng.IntN(2) == 0 {
				l, err := m.RLock(ctx)
				s.noteWait([]string{"rw:d"}, who+"(read)", true, from, *ticket, err)
				got(who+"(read)", l, err, true)
			} else if err == nil {
				l, err := m.Lock(ctx)
				s.noteWait([]string{"rw:d"}, who+"(write)", false, from, *ticket, err)
				got(who+"(write)", l, err, false)
			}
		case 7:
			if sem, err := c.Semaphore("s", 2, keyOpts...); err == nil {
				from := time.Now()
				l, err := sem.Acquire(ctx)
				s.noteWait([]string{"sem:s"}, who+"(permit)", false, from, *ticket, err)
				got(who+"(permit)", l, err, false)
			}
		case 8:
			s.lead(ctx, c, who, hold)
		default:
			switch rng.IntN(4) {
			case 0, 1:
				s.readLeader(ctx, c, who)
			case 2:
				s.observeLeaders(c, who, s.ttl+2*hold)
			}
			time.Sleep(time.Duration(rng.Int64N(int64(s.ttl / 8))))
		}
		cancel()
		unregister()
	}
}

// quitsOf is c's calls in flight (see simQuits).
func (s *simRun) quitsOf(c *Client) *simQuits {
	return s.quits[slices.Index(s.clients, c)]
}

// noteWait records a Lock call on keys (a reader's, on the read-write
// lock) from from to now, with its ticket if it queued, failed or not.
func (s *simRun) noteWait(keys []string, who string, reader bool, from, ticket time.Time, err error) {
	guarded := s.guardedSince(from)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, simWait{keys: keys, reader: reader, who: who, from: from, ticket: ticket, to: time.Now(), failed: err != nil, blind: heardNoNode(err), guarded: guarded})
}

// heardNoNode reports whether err is a Lock's failure whose try heard no
// node: none agreed, and each says the context ended.
func heardNoNode(err error) bool {
	var qerr *QuorumError
	if !errors.As(err, &qerr) || qerr.Granted > 0 || len(qerr.Nodes) == 0 {
		return false
	}
	for _, n := range qerr.Nodes {
		if !ctxEnd(n.Err) {
			return false
		}
	}
	return true
}

// simTicket is the context key of a worker's *time.Time for its Lock
// call's ticket, which the observer fills in (Event.Queued).
type simTicket struct{}

// simReentry marks the context of a holder's re-entry (WithToken).
type simReentry struct{}

// lead campaigns in the run's election for as long as ctx allows, and
// leads for hold: its term is the holding's fencing token.
func (s *simRun) lead(ctx context.Context, c *Client, who string, hold time.Duration) {
	e, err := c.Election("e")
	if err != nil {
		return
	}
	_ = e.Lead(ctx, who, func(ctx context.Context, ld *Leadership) error {
		from := time.Now()
		backed := func() { s.checkBacked(who+"(leader)", ld.Lock()) }
		live := s.workFor(ctx, from, hold/2, backed)
		if ctx.Err() == nil { // a new value, in the same term
			_ = ld.Proclaim(ctx, who+"'")
			live = s.workFor(ctx, live, hold/2, backed)
		}
		s.record(simHolding{keys: []string{"election:e"}, who: who + "(leader)", token: ld.Lock().Token(), fence: ld.Term(), got: from, from: from, to: live})
		return nil
	})
}

// readLeader asks who leads the run's election, and records the answer:
// a leader, or none (ErrNoLeader); other errors (too few nodes answered)
// say nothing.
func (s *simRun) readLeader(ctx context.Context, c *Client, who string) {
	e, err := c.Election("e")
	if err != nil {
		return
	}
	r := simRead{who: who, call: time.Now()}
	ld, err := e.Leader(ctx)
	r.ret, r.term, r.none = time.Now(), ld.Term, errors.Is(err, ErrNoLeader)
	if err == nil || r.none {
		s.mu.Lock()
		s.reads = append(s.reads, r)
		s.mu.Unlock()
	}
}

// observeLeaders follows the run's election with Observe for d, and
// records what it saw, and when.
func (s *simRun) observeLeaders(c *Client, who string, d time.Duration) {
	e, err := c.Election("e")
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	o := simObserver{who: who, from: time.Now()}
	for ld := range e.Observe(ctx) {
		o.seen = append(o.seen, simSeen{at: time.Now(), term: ld.Term, seq: ld.seq})
	}
	o.to = time.Now()
	s.mu.Lock()
	s.observers = append(s.observers, o)
	s.mu.Unlock()
}

// workFor works under ctx from from for up to hold, looking at ctx every
// TTL/10 (and running check before each look's sleep), and returns the
// last time a look found it live: the work relied on its lock until then.
func (s *simRun) workFor(ctx context.Context, from time.Time, hold time.Duration, check func()) time.Time {
	live := from
	for deadline := from.Add(hold); time.Now().Before(deadline); live = time.Now() {
		check()
		time.Sleep(s.ttl / 10)
		if ctx.Err() != nil {
			break
		}
	}
	return live
}

// holdFor holds l (if err is nil) for up to hold, extending it now and
// then while it is valid, and releases it, with a cooldown at times. Now
// and then the holder is paused past its validity, as a process can be,
// and then extends the lock or releases it. A holding is recorded up to
// the earliest of its release, its validity's end and the lock's end
// (Done closed: Close released it, or it was found taken over); a
// successful extension after the validity ran out starts a new holding.
func (s *simRun) holdFor(who string, l *Lock, err error, reader bool, hold time.Duration, rng *rand.Rand) {
	if err != nil {
		return
	}
	got := time.Now()
	var cooldown time.Duration // the release's: the keys are left to expire then
	if rng.IntN(5) == 0 {
		cooldown = time.Millisecond + time.Duration(rng.Int64N(int64(s.ttl))) // the least UnlockAfter takes
	}
	var ended atomic.Int64 // when Done closed, in ns since begin
	go func() { <-l.Done(); ended.Store(int64(time.Since(s.begin))) }()
	from := got
	held := func(to time.Time) {
		// Done does not reopen after an extension that revived the lock:
		// an end counts for the holding it came in.
		if e := s.begin.Add(time.Duration(ended.Load())); ended.Load() != 0 && !e.Before(from) {
			to = earliest(to, e)
		}
		to = earliest(earliest(to, s.end), l.validUntil()) // Close releases it at the end
		s.record(simHolding{keys: l.Keys(), reader: reader, who: who, token: l.Token(), fence: l.Fence(), got: got, from: from, to: to, expires: cooldown > 0 || to.Before(time.Now())})
	}
	deadline := from.Add(hold)
	for step := s.ttl / 4; ; {
		s.checkBacked(who, l)
		if !time.Now().Before(deadline) {
			held(time.Now())
			break
		}
		if rng.IntN(8) == 0 { // paused past the validity
			time.Sleep(l.Validity() + time.Duration(rng.Int64N(int64(s.ttl))))
			// Its validity may have grown meanwhile (a reader let in
			// extends to its TTL in the background): held until now then.
			held(earliest(l.validUntil(), time.Now()))
			if rng.IntN(2) == 0 || l.Extend(context.Background(), s.ttl) != nil {
				break
			}
			from = time.Now() // extended after its end: a holding anew
			continue
		}
		if l.Validity() <= step && (rng.IntN(2) == 0 || l.Extend(context.Background(), s.ttl) != nil) {
			held(time.Now())
			break
		}
		time.Sleep(step)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.ttl)
	sent := time.Now() // a cooldown counts from when a node ran the release: after this
	err = l.UnlockAfter(ctx, cooldown)
	cancel()
	s.mu.Lock()
	if err == nil {
		s.released[l.Token()] = time.Now()
	}
	if cooldown > 0 { // where the release ran, failed or not
		s.cooldowns[l.Token()] = time.Now().Add(cooldown)
	}
	if cooldown > 0 && err == nil { // it keeps others out, as a holding (give or take the nodes' clocks)
		s.holdings = append(s.holdings, simHolding{keys: l.Keys(), reader: reader, who: who + "(cooldown)", token: l.Token(), got: got,
			from: time.Now(), to: sent.Add(cooldown - drift(cooldown, defaultDriftFactor)), expires: true})
	}
	s.mu.Unlock()
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// doWork runs Do for hold, the work looking at its context every TTL/10
// (and checking that its lock, which Do's context carries, is backed).
func (s *simRun) doWork(c *Client, who, key string, hold time.Duration, opts []Option) {
	_ = c.Do(context.Background(), key, func(ctx context.Context) error {
		from := time.Now()
		l := ctx.(lockContext).l // (a panic, should Do's context ever stop carrying it)
		to := s.workFor(ctx, from, hold, func() { s.checkBacked(who+"(Do)", l) })
		s.record(simHolding{keys: []string{key}, who: who + "(Do)", from: from, to: to, expires: ctx.Err() != nil, kept: time.Now()})
		return nil
	}, opts...)
}

// blindFailures lists Lock calls that, with no fault under way, failed
// reporting a try that heard no node although they had waited long
// enough for an earlier try to hear them all (10 ms: every node answers
// within 1 ms when calm): a Lock cut short by its context reports the try
// before (cutShort), which says why it did not get the lock. Callers hold
// s.mu.
func (s *simRun) blindFailures() []string {
	var v []string
	for _, w := range s.waits {
		if !w.blind || w.guarded || w.to.Sub(w.from) < 10*time.Millisecond || !s.calmBetween(w.from.Add(-defaultWaiterLease), w.to) {
			continue
		}
		v = append(v, fmt.Sprintf("keys %v: %s's Lock %s–%s failed reporting a try that heard no node", w.keys, w.who, s.at(w.from), s.at(w.to)))
	}
	return v
}
