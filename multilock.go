package redlock

import (
	"context"
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
// Callers never wait for each other holding part of a set (no key is ever
// held while waiting for another), so overlapping sets cannot deadlock. A
// multi-key Lock that has to wait takes one place (one ticket) in the wait
// queue of every one of its keys, as a one-key Lock does in its key's: it
// attempts once it is first on all of them, a release of any of its keys
// wakes it, and sets and one-key Locks whose keys overlap are served in
// the order they queued. An attempt that is not queued (TryLock, a Lock's
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
// every key as [Client.Lock] waits in its key's. Errors are those of
// Client.Lock.
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
