package redlock

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"
)

// Semaphore lets at most P holders in at once, over the Client's nodes. It
// is P slots, each an ordinary lock ("sem:NAME:i", i from 0 to P−1), and a
// holder is the holder of one slot: a permit is a [*Lock], with all a Lock
// offers (Unlock, UnlockAfter, Extend, Done, Fence per slot, Inspect of its
// key). A majority of nodes grants each slot to one holder at a time, so
// no more than P hold at once, under the lock's own assumptions.
//
// Counting holders per node and admitting on a majority of counts would be
// cheaper and is wrong: two majorities that overlap in a node can each
// admit P (docs/semaphore.md has the counterexample).
//
// Acquire tries the slots in a random order, so that holders spread over
// them; when every slot is held, it waits in line with the other waiters,
// in every slot's wait queue at once, and is served in its turn.
type Semaphore struct {
	c       *Client
	permits int
	keys    []string // the slots' lock keys
	wait    target   // a waiter's: every slot (see target.slots)
	lc      lockConfig
}

// maxPermits bounds P: a full sweep is P attempts, one after the other.
const maxPermits = 128

// Semaphore returns the semaphore called name with permits permits (1 to
// 128). All its users must give the same permits: a user with fewer slots
// uses only the first of them, one with more lets more in. Options are
// those of [Client.Lock] but WithToken (a token would re-enter a held slot
// and take a second permit for one holder): WithTTL, WithRetry,
// WithMetadata, WithAutoExtend, WithMaxHold and WithFencing (a fencing
// token per slot).
func (c *Client) Semaphore(name string, permits int, opts ...Option) (*Semaphore, error) {
	if permits < 1 || permits > maxPermits {
		return nil, invalid("semaphore permits %d outside [1, %d]", permits, maxPermits)
	}
	if name == "" {
		return nil, invalid("empty semaphore name")
	}
	last := slotKey(name, permits-1)
	lc, err := c.callConfig(last, toLock, opts)
	if err != nil {
		return nil, err
	}
	if lc.token != "" {
		return nil, invalid("WithToken does not apply to a semaphore: a token could hold two permits")
	}
	lc.sweeping = true
	s := &Semaphore{c: c, permits: permits, lc: lc, keys: make([]string, permits)}
	s.wait = target{key: "sem:" + name, slots: make([]target, permits)}
	for i := range s.keys {
		s.keys[i] = slotKey(name, i)
		s.wait.slots[i] = c.target(s.keys[i])
	}
	s.wait.rkey = s.wait.slots[0].rkey
	return s, nil
}

// slotKey is the lock key of a semaphore's slot i.
func slotKey(name string, i int) string { return "sem:" + name + ":" + strconv.Itoa(i) }

// TryAcquire makes one sweep: one attempt at each slot, in a random order,
// until one is granted. On failure the error is a [*QuorumError] matching
// [ErrNotObtained] (that of the last slot tried), with [ErrUnusable] when
// nodes fail for good.
func (s *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	if err := s.c.checkOpen(); err != nil {
		return nil, err
	}
	l, qerr := s.c.sweep(ctx, s.wait.slots, &s.lc, 1)
	if qerr != nil {
		return nil, qerr
	}
	return l, nil
}

// Acquire takes a permit, waiting as long as ctx allows: it sweeps the
// slots, and if every slot is held, waits in line: one place in the wait
// queue of every slot, so that waiters are served in the order they came,
// each from whichever slot frees first (its release wakes the first
// waiter). Errors, and the short first validity of a permit a release
// granted, are those of [Client.Lock].
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	return s.acquire(ctx, &s.lc)
}

func (s *Semaphore) acquire(ctx context.Context, lc *lockConfig) (*Lock, error) {
	if mutated(mutSemaphoreSweeps) {
		return s.c.retrying(ctx, lc, func(n int) (*Lock, *QuorumError) { return s.c.sweep(ctx, s.wait.slots, lc, n) })
	}
	return s.c.lockQueued(ctx, s.wait, lc)
}

// sweep tries the slots once each, in a random order, until one is
// granted: attempt n of a semaphore's Acquire, not queued. A slot whose
// queue has a live first waiter refuses it (others wait for a permit).
func (c *Client) sweep(ctx context.Context, slots []target, lc *lockConfig, n int) (*Lock, *QuorumError) {
	var last *QuorumError
	var soonest time.Duration
	for _, i := range rand.Perm(len(slots)) {
		l, qerr := c.attempt(ctx, slots[i], lc, n, nil)
		if qerr == nil {
			return l, nil
		}
		if qerr.cause != nil || qerr.unusable {
			return nil, qerr
		}
		if a := qerr.retryAfter; a > 0 && (soonest == 0 || a < soonest) {
			soonest = a
		}
		last = qerr
	}
	last.retryAfter = soonest
	return nil, last
}

// Do acquires a permit (waiting as Acquire does), runs fn while it is
// extended, and releases it, as [Client.Do] does for a lock: fn's context
// is cancelled if the permit is lost, with the cause.
func (s *Semaphore) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	lc := s.lc
	return s.c.do(ctx, &lc, fn, s.acquire)
}

// Inspect returns what every node holds at each slot, in slot order (see
// [Client.Inspect]); [KeyState.Holder] names each slot's holder.
func (s *Semaphore) Inspect(ctx context.Context) ([]*KeyState, error) {
	return s.c.inspect(ctx, s.keys, "")
}
