package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Lock is one acquisition of a lock. It is safe for concurrent use: a
// watchdog may call Extend while another goroutine calls Unlock. Operations
// that talk to the nodes run one at a time.
type Lock struct {
	c        *Client
	key      string
	rkey     string
	token    string
	meta     string
	cfg      lockConfig // as acquired
	fence    int64      // fencing token, with WithFencing
	acquired time.Time  // when the winning attempt started

	op  sync.Mutex // serialises Extend and Unlock
	ext *extender  // auto-extension, if any; set before the lock is shared

	mu         sync.Mutex // guards the fields below
	ttl        time.Duration
	until      time.Time
	released   bool
	cooldown   time.Duration // of the last Unlock
	nodes      []nodeState
	endErr     error         // why the lock ended: lost, expired or released
	lostCh     chan struct{} // made by Lost or auto-extension; closed when the lock ends
	lostClosed bool
	lostTimer  *time.Timer // without auto-extension: ends the lock when validity runs out
}

// nodeState is what the lock knows of one node beyond the acquisition.
//
// A grant that arrives after Lock returned is one more node holding our
// lock, unless an Unlock's release reached that node first and found
// nothing: whichever of the two replies comes second sees both facts and
// releases the grant again. A node whose release was confirmed is not asked
// again by a retried Unlock (it would answer "absent").
type nodeState struct {
	granted bool  // the node granted the lock, in time or late: our key was there
	acquire uint8 // latePending, lateGranted, or 0: answered in time, or refused
	release uint8 // releaseDone, releaseMissed, or 0: not asked yet
}

const (
	latePending = 1 + iota
	lateGranted
)

const (
	releaseDone = 1 + iota
	releaseMissed
)

// lateGrant handles an acquire reply that arrived after Lock returned.
func (l *Lock) lateGrant(ctx context.Context, i int, res result) {
	l.mu.Lock()
	st := &l.nodes[i]
	st.acquire = 0
	if res.status == statusOK || res.status == statusRefreshed {
		st.acquire, st.granted = lateGranted, true
	}
	l.mu.Unlock()
	l.releaseIfBehind(ctx, i)
}

// onRelease records one node's answer to an Unlock, on time or late.
func (l *Lock) onRelease(ctx context.Context, i int, res result) {
	l.mu.Lock()
	st := &l.nodes[i]
	if res.status == statusOK {
		st.release = releaseDone
	} else if st.release != releaseDone {
		st.release = releaseMissed
	}
	l.mu.Unlock()
	l.releaseIfBehind(ctx, i)
}

// releaseIfBehind releases node i again if its grant came in behind a
// release that found nothing.
func (l *Lock) releaseIfBehind(ctx context.Context, i int) {
	l.mu.Lock()
	st := &l.nodes[i]
	again := st.acquire == lateGranted && st.release == releaseMissed
	if again {
		st.acquire = 0 // once
	}
	ttl, cooldown := l.ttl, l.cooldown
	l.mu.Unlock()
	if again {
		l.c.releaseOn(ctx, []node{l.c.nodes[i]}, l.rkey, l.token, ttl, cooldown)
	}
}

// endedBy tells, from a failed extend or release round over the lock's
// nodes idx (nil: all of them), whether the lock has ended: ErrLockLost if
// a node that granted it now shows another token, ErrLockExpired if such a
// node has no key, nil if the answers cannot tell (too few nodes answered).
// A node that never granted the lock says nothing about it: a contender's
// passing key there, or no key, is what it had all along.
func (l *Lock) endedBy(r *round, idx []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ended error
	for j, res := range r.results {
		i := j
		if idx != nil {
			i = idx[j]
		}
		switch {
		case !l.nodes[i].granted:
		case res.status == statusHeld:
			return ErrLockLost
		case res.status == statusAbsent:
			ended = ErrLockExpired
		}
	}
	return ended
}

// Key returns the lock's key as given to Lock.
func (l *Lock) Key() string { return l.key }

// Token returns the lock's token: 130 random bits from crypto/rand (or the
// token given with [WithToken]). Pass it to WithToken to re-enter.
func (l *Lock) Token() string { return l.token }

// Fence returns the lock's fencing token (see [WithFencing]), or 0 when the
// lock was acquired without fencing.
func (l *Lock) Fence() uint64 { return uint64(l.fence) }

// Metadata returns the holder metadata stored with the lock.
func (l *Lock) Metadata() string { return l.meta }

// Until returns the time until which the lock is valid, on this process's
// monotonic clock. After Unlock, or once a failed Extend found the lock gone,
// it is a time in the past.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Validity returns how long the lock remains valid: 0 once it has expired,
// was released, or a failed Extend found it gone or held by another token.
// It is a local, conservative estimate that already deducts drift.
func (l *Lock) Validity() time.Duration {
	return max(l.Until().Sub(time.Now()), 0)
}

// invalidate marks the lock as no longer valid.
func (l *Lock) invalidate(released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.until.After(now) {
		l.until = now
	}
	l.released = l.released || released
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// Extend resets the lock's TTL to ttl on every node that still holds it. It
// succeeds only if a majority extended it within the new validity window,
// which then starts from the moment Extend was called, and returns as soon
// as that majority answered; a failing Extend waits for every node (at most
// the node timeout) to tell why. Extend never re-creates a key that has
// expired.
//
// On failure the error is a [*QuorumError] matching [ErrLockLost] (another
// token holds the key on a node that had granted the lock) or
// [ErrLockExpired] (the key is gone on such a node), after which the lock
// has ended (see [Lock.Lost]), or [ErrNotObtained] (too few nodes
// extended it), after which the lock keeps the validity it had. After
// Unlock, Extend returns [ErrReleased].
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	if err := checkDuration("TTL", ttl); err != nil {
		return err
	}
	if !canBeValid(ttl, c.cfg.drift) {
		return invalid("TTL %v leaves no validity after drift %v", ttl, drift(ttl, c.cfg.drift))
	}
	return l.extend(ctx, ttl)
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	c := l.c
	if err := ctx.Err(); err != nil {
		return &QuorumError{Op: "extend", Key: l.key, Quorum: c.Quorum(), err: ErrNotObtained, cause: err}
	}
	l.op.Lock()
	defer l.op.Unlock()
	if l.isReleased() {
		return fmt.Errorf("%w: %q", ErrReleased, l.key)
	}
	o := newOp(opExtend, l.rkey, l.token, "", ttl)
	start := time.Now()
	r := fanOut(ctx, c.work, c.nodes, c.Quorum(), c.nodeTimeout(ttl), o, tally.won, c.observing()) // on failure, hear every node: "lost" and "expired" differ
	end := time.Now()
	r.finish(&c.bg, nil)
	if v := validity(ttl, c.cfg.drift, start, end); r.tally.won() && v > 0 {
		l.mu.Lock()
		l.ttl, l.until = ttl, start.Add(ttl-drift(ttl, c.cfg.drift))
		if l.lostTimer != nil {
			l.lostTimer.Reset(l.until.Sub(time.Now()))
		}
		l.mu.Unlock()
		if c.observing() {
			c.emit(Event{Kind: EventExtended, Context: ctx, Key: l.key, Duration: end.Sub(start), Validity: v, Nodes: nodeEvents(c.nodes, r)})
		}
		return nil
	}
	qerr := c.quorumError("extend", l.key, c.nodes, r, 0, ctx)
	if ended := l.endedBy(r, nil); ended != nil {
		qerr.err = ended
	}
	if c.observing() {
		c.emit(Event{Kind: EventExtendFailed, Context: ctx, Key: l.key, Duration: end.Sub(start), Err: qerr, Nodes: nodeEvents(c.nodes, r)})
	}
	if qerr.err != ErrNotObtained {
		l.invalidate(false)
		l.lose(qerr)
	}
	return qerr
}

// Unlock releases the lock on every node, waiting for each at most the node
// timeout. It first stops auto-extension, if any, and waits for it, so that
// no extension can follow the release. It returns nil when a majority
// released the lock, which also proves the lock was still held by us until
// then. Otherwise the error is a [*QuorumError] matching [ErrLockLost]
// (another token holds the key on a node that had granted the lock),
// [ErrLockExpired] (the lock had expired), or [ErrNotObtained] (too few
// nodes confirmed: Unlock may be called again; unconfirmed keys expire at
// their TTL). A node that never granted the lock is no evidence either way.
// A second Unlock returns [ErrReleased].
//
// ctx must not be done: a cancelled context sends nothing. To release in a
// defer after the work's context may have been cancelled, pass
// context.WithoutCancel(ctx).
func (l *Lock) Unlock(ctx context.Context) error { return l.release(ctx, 0) }

// UnlockAfter releases the lock but keeps other tokens out for cooldown
// more: on every node that still holds it, the key is set to expire cooldown
// from now instead of being deleted. It is for "at most once per period"
// work. A cooldown of 0 is Unlock; otherwise it must be within [[MinTTL],
// [MaxTTL]]. Errors are those of [Lock.Unlock].
func (l *Lock) UnlockAfter(ctx context.Context, cooldown time.Duration) error {
	if cooldown != 0 {
		if err := checkDuration("cooldown", cooldown); err != nil {
			return err
		}
	}
	return l.release(ctx, cooldown)
}

func (l *Lock) release(ctx context.Context, cooldown time.Duration) error {
	c := l.c
	l.stopExtending()
	if err := ctx.Err(); err != nil {
		return &QuorumError{Op: "unlock", Key: l.key, Quorum: c.Quorum(), err: ErrNotObtained, cause: err}
	}
	l.op.Lock()
	defer l.op.Unlock()
	if l.isReleased() {
		return fmt.Errorf("%w: %q", ErrReleased, l.key)
	}
	// Ask the nodes whose release is not confirmed yet: all of them, but
	// when an earlier Unlock failed part-way.
	l.mu.Lock()
	ttl, nodes, idx, already := l.ttl, c.nodes, []int(nil), 0
	l.cooldown = cooldown
	for i := range l.nodes {
		if l.nodes[i].release == releaseDone {
			already++
		}
	}
	if already > 0 {
		nodes = nil
		for i := range l.nodes {
			if l.nodes[i].release != releaseDone {
				nodes, idx = append(nodes, c.nodes[i]), append(idx, i)
			}
		}
	}
	l.mu.Unlock()
	index := func(j int) int {
		if idx == nil {
			return j
		}
		return idx[j]
	}
	o := newOp(opRelease, l.rkey, l.token, "", cooldown)
	// Wait for every node (at most the node timeout), not just a majority:
	// a release still in flight leaves a key that an immediate re-Lock of
	// the same key counts against itself, which with one node down already
	// costs that Lock a node timeout. (Returning at a majority measured
	// about 18% faster on 5 local nodes; see docs/performance.md.)
	start := time.Now()
	r := fanOut(ctx, c.work, nodes, max(c.Quorum()-already, 0), c.nodeTimeout(ttl), o, nil, c.observing())
	r.finish(&c.bg, func(j int, res result) { l.onRelease(ctx, index(j), res) })
	for j, res := range r.results {
		if res.answered {
			l.onRelease(ctx, index(j), res)
		}
	}
	if r.tally.won() {
		l.invalidate(true)
		l.end(ErrReleased)
		c.untrack(l)
		c.hand.released(l.rkey, l.token)
		if c.observing() {
			now := time.Now()
			c.emit(Event{Kind: EventReleased, Context: ctx, Key: l.key, Duration: now.Sub(start), Held: now.Sub(l.acquired), Nodes: nodeEvents(nodes, r)})
		}
		return nil
	}
	qerr := c.quorumError("unlock", l.key, nodes, r, already, ctx)
	if ended := l.endedBy(r, idx); ended != nil {
		qerr.err = ended
	}
	if c.observing() {
		c.emit(Event{Kind: EventReleaseFailed, Context: ctx, Key: l.key, Duration: time.Now().Sub(start), Err: qerr, Nodes: nodeEvents(nodes, r)})
	}
	if qerr.err != ErrNotObtained { // nothing left to release
		l.invalidate(true)
		l.end(qerr)
		c.untrack(l)
		c.hand.released(l.rkey, l.token)
	} else {
		l.invalidate(false)
	}
	return qerr
}

// Lost returns a channel that is closed when the lock ends: when it can no
// longer be trusted (auto-extension could not keep a majority, an Extend
// found it gone or taken, or, without auto-extension, its validity ran out),
// or when it was released. [Lock.Err] then says which. Like a context's Done
// channel, it is never closed while the lock is valid.
func (l *Lock) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostCh == nil {
		l.lostCh = make(chan struct{})
		switch {
		case l.endErr != nil:
			close(l.lostCh)
			l.lostClosed = true
		case l.ext == nil:
			// No goroutine: a timer ends the lock when its validity runs out
			// (Extend moves it).
			l.lostTimer = time.AfterFunc(l.until.Sub(time.Now()), func() {
				l.lose(fmt.Errorf("%w: validity ran out", ErrLockExpired))
			})
		}
	}
	return l.lostCh
}

// Err returns nil while the lock is held and valid as far as this process
// knows; once [Lock.Lost] is closed, it returns why: an error matching
// [ErrLockLost] or [ErrLockExpired], or [ErrReleased] after Unlock.
func (l *Lock) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.endErr
}

// end records why the lock ended, once, and closes Lost. It reports whether
// this call was the one that ended it.
func (l *Lock) end(err error) bool {
	if !l.claimEnd(err) {
		return false
	}
	l.closeLost()
	return true
}

// claimEnd records err as the reason the lock ended, unless it has one.
func (l *Lock) claimEnd(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.endErr != nil {
		return false
	}
	l.endErr = err
	return true
}

// closeLost closes Lost (made later, it is made closed) and stops the timer.
func (l *Lock) closeLost() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lostCh != nil && !l.lostClosed {
		close(l.lostCh)
	}
	l.lostClosed = true
	if l.lostTimer != nil {
		l.lostTimer.Stop()
	}
}

// lose ends the lock as lost: it can no longer be trusted. Observers are told
// and, under Do, the work's context is cancelled with err as its cause,
// before Lost is closed.
func (l *Lock) lose(err error) {
	if !l.claimEnd(err) {
		return
	}
	c := l.c
	if c.observing() {
		c.emit(Event{Kind: EventLost, Context: context.Background(), Key: l.key, Held: time.Now().Sub(l.acquired), Err: err})
	}
	if l.cfg.onLost != nil {
		l.cfg.onLost(err)
	}
	l.closeLost()
}
