package redlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// Lock is one acquisition of a lock: its holder's handle. It is safe for
// concurrent use: a watchdog may call Extend while another goroutine calls
// Unlock. Operations that talk to the nodes run one at a time.
type Lock struct {
	c        *Client
	target   // its key (or keys)
	token    string
	cfg      lockConfig // as acquired
	fence    int64      // fencing token, with WithFencing
	acquired time.Time  // when the winning attempt started

	turn   serial     // one Extend, Proclaim or Unlock at a time
	ext    *extender  // auto-extension, if any; set before the lock is shared
	ending sync.Mutex // held while the lock is being ended (see look)
	// A look's fast path (see look): the end point as a duration since
	// acquired, kept with until; and whether the lock has ended.
	endAfter atomic.Int64
	over     atomic.Bool

	mu       sync.Mutex // guards the fields below
	ttl      time.Duration
	until    time.Time
	released bool
	cooldown time.Duration // of the last Unlock
	nodes    []nodeRecord
	endErr   error         // why the lock ended: expired, taken over or released
	done     chan struct{} // made by Done or auto-extension; closed when the lock ends
	doneShut bool          // done is closed (or, made later, will be made closed)
	timer    *time.Timer   // without auto-extension: ends the lock when validity runs out
	runOut   error         // auto-extension: why the lock ends if its validity runs out now
}

// nodeRecord is what the lock knows of one node beyond the acquisition.
//
// A grant that arrives after Lock returned is one more node holding our
// lock, unless an Unlock's release reached that node first and found
// nothing: whichever of the two replies comes second sees both facts and
// releases the grant again. A node whose release was confirmed is not asked
// again by a retried Unlock (it would answer "no key").
type nodeRecord struct {
	granted bool // the node granted the lock, in time or late: our key was there
	late    bool // its grant arrived after Lock returned
	release uint8
}

// nodeRecord.release
const (
	releaseNotAsked = iota
	releaseDone
	releaseMissed // the release found no key (or failed)
)

// Key returns the lock's key as given to Lock; for a lock on several keys
// ([Client.MultiLock]), the keys joined by spaces.
func (l *Lock) Key() string { return l.key }

// Keys returns the lock's keys: the one given to Lock, or those given to
// [Client.MultiLock].
func (l *Lock) Keys() []string { return l.given() }

// Token returns the lock's token: 130 random bits from crypto/rand (or the
// token given with [WithToken]). Pass it to WithToken to re-enter. Keep it
// secret: anyone with the token can release the lock.
func (l *Lock) Token() string { return l.token }

// Fence returns the lock's fencing token (see [WithFencing]), or 0 when the
// lock was acquired without fencing.
func (l *Lock) Fence() uint64 { return uint64(l.fence) }

// Validity returns how long the lock remains valid: 0 once it has expired,
// was released, or a failed Extend found it expired or taken over. It is a
// local, conservative estimate on this process's monotonic clock that
// already deducts drift.
func (l *Lock) Validity() time.Duration {
	return max(l.validUntil().Sub(time.Now()), 0)
}

func (l *Lock) validUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Extend resets the lock's TTL to ttl on every node that still holds it. It
// succeeds only if a majority extended it within the new validity window,
// which then starts from the moment Extend was called, and returns as soon
// as that majority answered; a failing Extend waits for every node (at most
// the node timeout) to tell why. Extend never re-creates a key that has
// expired. As with Unlock, a done ctx sends nothing, and once sent the
// calls do not depend on ctx: each node gets its extension.
//
// On failure the error is a [*QuorumError] matching [ErrTakenOver] or
// [ErrExpired], after which the lock has ended (see [Lock.Done]), or
// [ErrNotObtained] (too few nodes extended it), after which the lock keeps
// the validity it had. After Unlock, Extend returns [ErrReleased].
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
	if err := l.begin(ctx, "extend"); err != nil {
		return err
	}
	defer l.turn.leave()
	start := time.Now()
	// On failure, hear every node: taken over and expired differ. Detached,
	// as Unlock's releases are: a node whose extension was dropped because
	// the caller cancelled ctx right after a majority answered would keep
	// the old expiry, and the lock would survive one node fewer.
	r := c.send(ctx, request{op: l.op(wire.OpExtend, l.token, "", ttl), need: c.quorum(), timeout: c.nodeTimeout(ttl), stop: tally.won, detach: true})
	end := time.Now()
	r.finish(&c.bg, nil)
	if v := validity(ttl, c.cfg.drift, start, end); r.tally.won() && v > 0 {
		l.mu.Lock()
		l.ttl, l.until = ttl, start.Add(ttl-drift(ttl, c.cfg.drift))
		l.noteEnd()
		if l.timer != nil {
			l.timer.Reset(l.until.Sub(time.Now()))
		}
		l.mu.Unlock()
		if c.observing() {
			c.emit(Event{Kind: EventExtend, Context: ctx, Key: l.key, Duration: end.Sub(start), Validity: v, Nodes: nodeResults(c.nodes, r)})
		}
		return nil
	}
	qerr := l.updateFailed(ctx, "extend", r)
	if c.observing() {
		c.emit(Event{Kind: EventExtend, Context: ctx, Key: l.key, Duration: end.Sub(start), Err: qerr, Nodes: nodeResults(c.nodes, r)})
	}
	if qerr.err != ErrNotObtained {
		l.invalidate(false)
		l.endEarly(qerr)
	}
	return qerr
}

// begin starts an extend or proclaim (op): it fails if ctx is done or the
// lock released, and otherwise returns holding the lock's serial turn
// (serial.go), which the caller ends with l.turn.leave.
func (l *Lock) begin(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return &QuorumError{Op: op, key: l.key, Quorum: l.c.quorum(), err: ErrNotObtained, cause: err}
	}
	l.turn.enter()
	if l.isReleased() {
		l.turn.leave()
		return fmt.Errorf("%w: %q", ErrReleased, l.key)
	}
	return nil
}

// updateFailed describes a failed extend or proclaim round r over every
// node, as ErrTakenOver or ErrExpired when the answers show the lock has
// ended (the caller then ends it), else ErrNotObtained.
func (l *Lock) updateFailed(ctx context.Context, op string, r *round) *QuorumError {
	qerr := quorumError(op, l.key, l.c.nodes, l.c.quorum(), r, 0, ctx)
	if ended := l.endedBy(r, nil); ended != nil {
		qerr.err = ended
	}
	return qerr
}

// proclaim replaces the metadata stored with the lock on every node that
// holds it, keeping the keys' TTLs, and announces the change on the key's
// leader channel with term as the payload (see Election). Like Extend, it
// succeeds when a majority replaced it, and ends the lock when the answers
// show it has been taken over or has expired.
func (l *Lock) proclaim(ctx context.Context, meta string, term int64) error {
	c := l.c
	if err := l.begin(ctx, "proclaim"); err != nil {
		return err
	}
	defer l.turn.leave()
	if l.Validity() <= 0 {
		return &QuorumError{Op: "proclaim", key: l.key, Quorum: c.quorum(), err: ErrExpired, detail: "validity ran out"}
	}
	o := wire.NewOp(wire.OpProclaim, l.rkey, l.token, wire.EncodeValue(l.token, meta), 0)
	o.Fence = term
	l.mu.Lock()
	ttl := l.ttl
	l.mu.Unlock()
	r := c.send(ctx, request{op: o, need: c.quorum(), timeout: c.nodeTimeout(ttl), stop: tally.won})
	r.finish(&c.bg, nil)
	if r.tally.won() && l.Validity() > 0 {
		return nil
	}
	qerr := l.updateFailed(ctx, "proclaim", r)
	switch hint := c.unusable(r); {
	case r.tally.won():
		qerr.err, qerr.detail = ErrExpired, "validity ran out"
	case hint != "" && qerr.cause == nil:
		qerr.unusable, qerr.detail = true, hint
	}
	if qerr.err != ErrNotObtained {
		l.invalidate(false)
		l.endEarly(qerr)
	}
	return qerr
}

// Unlock releases the lock on every node. It first stops auto-extension, if
// any, and waits for it, so that no extension can follow the release. It
// returns nil as soon as a majority released the lock, which also proves
// the lock was still held by us until then; the other nodes' releases are
// handled as they come. Otherwise, having waited for each node at most the
// node timeout, it returns a [*QuorumError] matching [ErrTakenOver],
// [ErrExpired], or [ErrNotObtained] (too few nodes confirmed: Unlock may be
// called again; the keys not confirmed expire at their TTL). A node that
// never granted the lock is no evidence either way. A second Unlock returns
// [ErrReleased].
//
// ctx must not be done: a cancelled context sends nothing. To release in a
// defer after the work's context may have been cancelled, pass
// context.WithoutCancel(ctx). Once sent, the releases do not depend on
// ctx: when ctx ends during Unlock, or right after it returns, Unlock
// stops waiting, but each node still gets its release (within the node
// timeout).
func (l *Lock) Unlock(ctx context.Context) error { return l.release(ctx, 0) }

// UnlockAfter releases the lock but keeps other tokens out for cooldown
// more: on every node that still holds it, the key is set to expire
// cooldown from now instead of being deleted. It is for "at most once per
// period" work. A cooldown of 0 is Unlock; otherwise it must be within
// [1 ms, 24 h]. Errors are those of [Lock.Unlock].
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
		return &QuorumError{Op: "unlock", key: l.key, Quorum: c.quorum(), err: ErrNotObtained, cause: err}
	}
	l.turn.enter()
	defer l.turn.leave()
	if l.isReleased() {
		return fmt.Errorf("%w: %q", ErrReleased, l.key)
	}
	ttl, idx, already := l.toRelease(cooldown)
	nodes := c.nodes
	if idx != nil {
		nodes = make([]node, len(idx))
		for j, i := range idx {
			nodes[j] = c.nodes[i]
		}
	}
	// Return once a majority released (on failure, hear every node:
	// taken over and expired differ). The rest are handled as they come:
	// each node's stream sends this Client's later calls after the release,
	// so a re-Lock of the key by this Client cannot find it still there.
	// The calls are detached from ctx: a caller that cancels ctx as soon as
	// Unlock returns (defer cancel()) would otherwise drop the releases
	// still queued for the slower nodes, whose keys stayed until their TTL.
	start := time.Now()
	o := l.op(wire.OpRelease, l.token, "", cooldown)
	o.Wake = c.hand.wakeArg
	r := c.send(ctx, request{op: o, nodes: nodes, need: max(c.quorum()-already, 0), timeout: c.nodeTimeout(ttl), stop: tally.won, detach: true})
	r.finish(&c.bg, func(j int, res wire.Result) { l.onRelease(ctx, nodeIndex(idx, j), res) })
	for j, res := range r.results {
		if res.Answered {
			l.onRelease(ctx, nodeIndex(idx, j), res)
		}
	}
	return l.concludeRelease(ctx, start, nodes, r, already, idx)
}

// nodeIndex is the Client's index of the j-th node of a round over the
// nodes idx (nil: all of them).
func nodeIndex(idx []int, j int) int {
	if idx == nil {
		return j
	}
	return idx[j]
}

// toRelease notes the cooldown of this release and returns the lock's TTL
// and the nodes to ask: all of them (nil) but when an earlier Unlock failed
// part-way, then those not confirmed yet, with how many were.
func (l *Lock) toRelease(cooldown time.Duration) (ttl time.Duration, idx []int, already int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cooldown = cooldown
	for i := range l.nodes {
		if l.nodes[i].release == releaseDone {
			already++
		}
	}
	if already > 0 {
		for i := range l.nodes {
			if l.nodes[i].release != releaseDone {
				idx = append(idx, i)
			}
		}
	}
	return l.ttl, idx, already
}

// concludeRelease concludes a release round r over nodes (the lock's nodes idx,
// nil: all), with already confirmations from earlier rounds.
func (l *Lock) concludeRelease(ctx context.Context, start time.Time, nodes []node, r *round, already int, idx []int) error {
	c := l.c
	if r.tally.won() {
		l.invalidate(true)
		l.end(ErrReleased)
		c.untrack(l)
		l.handOver(namedHeads(r))
		if c.observing() {
			now := time.Now()
			c.emit(Event{Kind: EventRelease, Context: ctx, Key: l.key, Duration: now.Sub(start), Held: now.Sub(l.acquired), Nodes: nodeResults(nodes, r)})
		}
		return nil
	}
	qerr := quorumError("unlock", l.key, nodes, c.quorum(), r, already, ctx)
	if ended := l.endedBy(r, idx); ended != nil {
		qerr.err = ended
	}
	if c.observing() {
		c.emit(Event{Kind: EventRelease, Context: ctx, Key: l.key, Duration: time.Since(start), Err: qerr, Nodes: nodeResults(nodes, r)})
	}
	if qerr.err == ErrNotObtained {
		l.invalidate(false)
		return qerr
	}
	// Nothing left to release: the lock had ended.
	l.invalidate(true)
	l.end(qerr)
	c.untrack(l)
	l.handOver(namedHeads(r))
	return qerr
}

// namedHeads returns the first waiters of the key's queue that the nodes
// of a release round r named, nil if none did.
func namedHeads(r *round) []string {
	var named []string
	for _, res := range r.results {
		if res.Head != "" {
			named = append(named, res.Head)
		}
	}
	return named
}

// endedBy tells, from a failed extend or release round over the lock's
// nodes idx (nil: all of them), whether the lock has ended: ErrTakenOver if
// a node that granted it now shows another token, ErrExpired if such a
// node has no key, nil if the answers cannot tell (too few nodes
// answered). A node that never granted the lock says nothing about it: a
// contender's passing key there, or no key, is what it had all along.
func (l *Lock) endedBy(r *round, idx []int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ended error
	for j, res := range r.results {
		switch i := nodeIndex(idx, j); {
		case !l.nodes[i].granted:
		case res.Status == wire.StatusHeld:
			return ErrTakenOver
		case res.Status == wire.StatusAbsent:
			ended = ErrExpired
		}
	}
	return ended
}

// lateGrant handles an acquire reply that arrived after Lock returned.
func (l *Lock) lateGrant(ctx context.Context, i int, res wire.Result) {
	l.mu.Lock()
	if res.Status == wire.StatusOK || res.Status == wire.StatusRefreshed {
		l.nodes[i].granted, l.nodes[i].late = true, true
	}
	l.mu.Unlock()
	l.releaseIfBehind(ctx, i)
}

// onRelease records one node's answer to an Unlock, on time or late.
func (l *Lock) onRelease(ctx context.Context, i int, res wire.Result) {
	l.mu.Lock()
	st := &l.nodes[i]
	if res.Status == wire.StatusOK {
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
	again := st.late && st.release == releaseMissed
	if again {
		st.late = false // once
	}
	ttl, cooldown := l.ttl, l.cooldown
	l.mu.Unlock()
	if again {
		l.c.releaseOn(ctx, []node{l.c.nodes[i]}, l.target, l.token, ttl, cooldown)
	}
}

// invalidate marks the lock as no longer valid.
func (l *Lock) invalidate(released bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.until.After(now) {
		l.until = now
		l.noteEnd()
	}
	l.released = l.released || released
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// target is what a lock locks: one key, or the keys of a multi-key lock.
type target struct {
	key   string    // as given; a multi-key lock's keys joined by spaces
	rkey  string    // the Redis key; a multi-key lock's first
	keys  []string  // a multi-key lock's keys as given; nil for one key
	rkeys []string  // a multi-key lock's Redis keys (sorted); nil for one key
	mode  wire.Mode // a read-write lock's side (one key)
}

// target is the target of a lock on one key.
func (c *Client) target(key string) target { return target{key: key, rkey: c.redisKey(key)} }

// op prepares an op of kind on the target's keys.
func (t *target) op(kind wire.Kind, token, value string, ttl time.Duration) *wire.Op {
	o := wire.NewOp(kind, t.rkey, token, value, ttl)
	o.Keys, o.Mode = t.rkeys, t.mode
	return o
}

// given returns the target's keys, as given.
func (t *target) given() []string {
	if t.keys == nil {
		return []string{t.key}
	}
	return slices.Clone(t.keys)
}

// handOver tells the Client's hand-off that the lock has been released
// (or has ended), with the first waiters its release round named (one
// key only: a multi-key release wakes through the notices alone).
func (l *Lock) handOver(heads []string) {
	if l.rkeys == nil {
		l.c.hand.released(l.rkey, l.token, heads)
		return
	}
	for _, k := range l.rkeys {
		l.c.hand.released(k, l.token, nil)
	}
}
