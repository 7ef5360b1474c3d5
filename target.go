package redlock

import (
	"slices"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// target is what a primitive hands the engine (attempt, wait, Lock): what
// its locks lock, and which of the wire's scripts do it (mode). Every
// difference between primitives that the engine must know is a method
// here.
type target struct {
	key   string    // as given; a multi-key lock's keys joined by spaces
	rkey  string    // the Redis key; a multi-key lock's first
	keys  []string  // a multi-key lock's keys as given; nil for one key
	rkeys []string  // a multi-key lock's Redis keys (sorted); nil for one key
	mode  wire.Mode // the primitive's scripts: a mutex's, a set's, a read-write lock's side
	// slots, for a semaphore's waiter, are the targets of its slots: a
	// holder holds one of them (a lock of its own), and a waiter has one
	// place in the queue of each, so that it is served from whichever
	// frees first. The waiter's own target is never attempted as it is.
	slots []target
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

// multiKey reports whether the target is a multi-key lock's keys.
func (t *target) multiKey() bool { return t.mode == wire.ModeSet }

// reader reports whether the target is a read-write lock's read side.
func (t *target) reader() bool { return t.mode == wire.ModeRead }

// takesFence reports whether a grant of the target can carry a fencing
// token: not a reader's, which holds no key.
func (t *target) takesFence() bool { return !t.reader() }

// eachQueueKey calls f with each Redis key in whose wait queue a waiter
// for the target takes its place: a set's waiter has one place (one ID,
// one ticket) in every key's queue, a semaphore's in every slot's.
// (A semaphore's slots are one-key targets. f does not escape, so a
// caller's closure stays on its stack: busy and handOver are on every
// Lock's and Unlock's path.)
func (t *target) eachQueueKey(f func(rkey string)) {
	switch {
	case t.slots != nil:
		for _, st := range t.slots {
			f(st.rkey)
		}
	case t.multiKey():
		for _, k := range t.rkeys {
			f(k)
		}
	default:
		f(t.rkey)
	}
}

// eachQueueTarget calls f with each target whose queue op a waiter for t
// sends: t itself (a set's op covers every key), or each of a semaphore's
// slots (which a Cluster holds in different hash slots: one op each).
func (t *target) eachQueueTarget(f func(target)) {
	if t.slots == nil {
		f(*t)
		return
	}
	for _, st := range t.slots {
		f(st)
	}
}

// choosesSlot reports whether a waiter for the target attempts whichever
// of its slots a look found it first on (a semaphore's), rather than the
// target itself: a wake then calls for a look first.
func (t *target) choosesSlot() bool { return t.slots != nil }

// eachHeldKey calls f with each Redis key a holder of the target holds,
// whose wait queue its release hands over: none for a reader.
func (t *target) eachHeldKey(f func(rkey string)) {
	switch {
	case t.mode == wire.ModeRead:
	case t.multiKey():
		for _, k := range t.rkeys {
			f(k)
		}
	default:
		f(t.rkey)
	}
}
