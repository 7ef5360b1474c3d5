package redlock

import (
	"context"
	"math/bits"
	"slices"
	"strings"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
)

// MultiLock locks several keys together: all of them, or none. On each
// node one script sets every key to the holder's token, or none when
// another token holds any of them, so no node is ever left with part of a
// grant; the lock holds when a majority of nodes granted every key, within
// the validity window, as a lock on one key does. The lock is a [*Lock]
// over all the keys at once: Unlock, UnlockAfter, Extend, Done,
// auto-extension and fencing apply to every key together, and a key locked
// by MultiLock is held against [Client.Lock] of that key alone, and the
// other way round.
//
// No holder waits for another holding part of a set, so overlapping sets
// cannot deadlock. A multi-key Lock that has to wait takes one place (one
// ticket) in the wait queue of every one of its keys, as a one-key Lock
// does in its key's, and sets and one-key Locks whose keys overlap are
// served in the order they queued: the release of each key grants it to
// the set's place where the set is first in line (with the default
// options: no token of its own, metadata or fencing; else the release
// wakes it), and the set holds once a majority of nodes have granted it
// every key, in the round of the last release, by its place's ID, as
// [Client.Lock] is granted one key. A key granted while the set waits
// for another is kept for it, as a free key with the set first in line
// is; it lapses within the waiter lease if the set is gone, and the set
// never holds by it alone. A set first in line on every key whose keys
// are free attempts. An attempt that is not queued (TryLock, a Lock's
// first) is refused where a key's queue has a live first waiter.
type MultiLock struct {
	c  *Client
	t  target
	lc lockConfig
}

// maxMultiKeys bounds a MultiLock's keys: every node runs one script over
// all of them for each acquisition.
const maxMultiKeys = 64

// MultiLock returns the lock on every key of keys together (1 to 64
// distinct keys, in any order). It rejects an empty set, a repeated key and
// a key Lock would reject with [ErrInvalidArgument], as it does keys that a
// Redis Cluster node holds in different hash slots: a script there can only
// touch one slot. (A key's slot is that of its text up to the first '}', or
// all of it: keys that start alike up to a '}', such as "order:{42}:items"
// and "order:{42}:payment", share one.) With one key it is that key's
// ordinary lock, queued as Lock is. Options are those of [Client.Lock]:
// WithTTL, WithRetry, WithMetadata, WithToken, WithAutoExtend, WithMaxHold
// and WithFencing (one fencing token, larger than any handed out before
// for any of the keys, alone or with others).
func (c *Client) MultiLock(keys []string, opts ...Option) (*MultiLock, error) {
	switch {
	case len(keys) == 0:
		return nil, invalid("no keys to lock")
	case len(keys) > maxMultiKeys:
		return nil, invalid("%d keys, more than %d", len(keys), maxMultiKeys)
	}
	for i, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, invalid("key %d: %w", i, err)
		}
		if j := slices.Index(keys[:i], k); j >= 0 {
			return nil, invalid("key %q given twice (keys %d and %d)", k, j, i)
		}
	}
	lc, err := c.callConfig(keys[0], toLock, opts)
	if err != nil {
		return nil, err
	}
	m := &MultiLock{c: c, lc: lc, t: c.target(keys[0])}
	if len(keys) == 1 {
		return m, nil
	}
	m.t.key, m.t.keys, m.t.mode = strings.Join(keys, " "), slices.Clone(keys), wire.ModeSet
	// The same order on every caller: nodes refusing a set name the same
	// key's holder (see acquireMultiSrc), which retryHint counts.
	m.t.rkeys = make([]string, len(keys))
	for i, k := range keys {
		m.t.rkeys[i] = c.redisKey(k)
	}
	slices.Sort(m.t.rkeys)
	m.t.rkey = m.t.rkeys[0]
	if err := c.checkSlots(keys); err != nil {
		return nil, err
	}
	return m, nil
}

// checkSlots rejects keys that a Cluster node among the Client's holds in
// different hash slots.
func (c *Client) checkSlots(keys []string) error {
	for _, n := range c.nodes {
		if rn, ok := n.(*nodeio.Node); !ok || !rn.Cluster() {
			continue
		}
		first := hashSlot(c.redisKey(keys[0]))
		for _, k := range keys[1:] {
			if s := hashSlot(c.redisKey(k)); s != first {
				return invalid("keys %q (slot %d) and %q (slot %d) are in different hash slots of the Cluster node %s: one script can only touch one slot; give the keys a common start up to a '}', such as \"order:{42}:items\" and \"order:{42}:payment\"",
					keys[0], first, k, s, n.Name())
			}
		}
	}
	return nil
}

// hashSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the text between the first '{' and the next '}', when not
// empty) or of the whole key, modulo 16384.
func hashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// TryLock makes exactly one attempt to lock every key. On failure the
// error is a [*QuorumError] matching [ErrNotObtained].
func (m *MultiLock) TryLock(ctx context.Context) (*Lock, error) {
	return m.c.tryLock(ctx, m.t, &m.lc)
}

// Lock locks every key, waiting as long as ctx allows, in the wait queue of
// every key as [Client.Lock] waits in its key's. Errors, and the short
// first validity of a lock the releases granted, are those of Client.Lock.
func (m *MultiLock) Lock(ctx context.Context) (*Lock, error) {
	lc := m.lc
	return m.lock(ctx, &lc)
}

func (m *MultiLock) lock(ctx context.Context, lc *lockConfig) (*Lock, error) {
	return m.c.lockQueued(ctx, m.t, lc)
}

// Do locks every key (waiting as Lock does), runs fn while the lock is
// extended, and releases it, as [Client.Do] does for one key: fn's context
// is cancelled if the lock is lost, with the cause.
func (m *MultiLock) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	lc := m.lc
	return m.c.do(ctx, &lc, fn, m.lock)
}

// Inspect returns what every node holds at each key, in the order given
// (see [Client.Inspect]).
func (m *MultiLock) Inspect(ctx context.Context) ([]*KeyState, error) {
	return m.c.inspect(ctx, m.t.given(), "")
}

// A set granted its keys by their releases (issue 28; letin.go has what
// it shares with a writer granted one key): each key's release grants it
// to the set's place where the set is first in that key's queue, and
// the set holds once a majority of nodes have granted it every key.
// docs/design.md ("A set's keys, granted too") has the argument.

// setAdmits returns a set's admissions as one key's: a node is admitted
// (or counted) where every key is, from the earliest of its keys' sends
// (each key's grant lives until a lease after its own).
func (w *waiter) setAdmits() admits {
	if mutated(mutSetGrantAny) {
		return slices.MaxFunc(w.keys, func(a, b admits) int { return bits.OnesCount64(a.counted) - bits.OnesCount64(b.counted) })
	}
	all := w.keys[0]
	all.from = slices.Clone(all.from)
	for _, a := range w.keys[1:] {
		all.admitted &= a.admitted
		all.counted &= a.counted
		for i, t := range a.from {
			if t.Before(all.from[i]) {
				all.from[i] = t
			}
		}
	}
	return all
}

// setAdmitted wakes a set's waiter w, one of whose keys, rkey, a node has
// just granted it (a: that key's admissions), if it now holds, or should
// attempt; callers hold h.mu. A set holds where every key is granted
// (setAdmits); a key granted alone is a reservation its place owns,
// while the set waits for its other keys. Once rkey is granted on a
// majority, that is the key's release reaching w, as a release's notices
// are for a set that is not granted (see handoff.notice): w waits on for
// the keys still held, and once none is, attempts where no grant is
// coming for a key (it was free: nothing releases it) or the grants can
// no longer make a majority, and otherwise soon (attemptSoon), unless
// the rest of the grants come first; its attempt takes the keys granted
// to its place. (After an attempt, grants count no more: each key's are only
// its release, as for a writer.) A grant that leaves rkey
// granted on a minority looks soon (lookShort), unless the rest come
// first: a release may have granted other waiters on the other nodes
// (grantsStuck).
func (h *handoff) setAdmitted(q *waitQueue, w *waiter, rkey string, a *admits) {
	all := w.setAdmits()
	if bits.OnesCount64(all.counted) >= h.letInQuorum() && (!w.attempted || mutated(mutGrantAfterAttempt)) {
		w.mustLook = false
		q.wake(w)
		return
	}
	if bits.OnesCount64(a.admitted) < h.c.quorum() {
		if !w.soonDue && !mutated(mutGrantsStuckWait) { // (counted or not: see onAdmission)
			q.lookShort(w)
		}
		return
	}
	w.callOffShortLook(h.c.quorum())
	if !w.freeOf(rkey) {
		if w.waitsOnSplit() {
			q.lookSoon(w)
		}
		return
	}
	if !h.mayCount(w, &all) || slices.ContainsFunc(w.keys, func(k admits) bool { return k.admitted == 0 }) {
		w.mustLook = false
		q.wake(w)
		return
	}
	q.attemptSoon(w) // unless the rest of the grants come first
}
