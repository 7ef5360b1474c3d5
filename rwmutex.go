package redlock

import (
	"context"

	"github.com/redlock-go/redlock/internal/wire"
)

// RWMutex is a read-write lock over the Client's nodes: many readers at
// once, or one writer. A writer is granted by a node only where no reader
// holds, a reader only where no writer holds; the side holds when a
// majority of nodes granted it, and two majorities share a node, so a
// reader and a writer never both hold, nor two writers.
//
// A writer is an ordinary lock on the key "rw:NAME", with all a Lock
// offers (the wait queue across processes, fencing, Extend, UnlockAfter,
// auto-extension). Each reader is its own token with its own lease on each
// node (an entry in a sorted set beside the key), so a reader that dies
// keeps writers out only until its lease runs out, and a reader is a
// [*Lock] too: Unlock, UnlockAfter (keeping writers out for the
// cooldown), Extend, Done and auto-extension work on it; it has no fencing
// token and keeps no metadata.
//
// Neither side starves: readers and writers that have to wait take their
// places in the key's one wait queue, in the order they came. The readers
// ahead of the first writer in it enter together (a writer's release wakes
// them all), then that writer once the last of them has left, then the
// readers that came while it waited, and so on; a new reader enters at
// once only where no writer holds or waits (readers already in keep
// reading, and may extend). As with [sync.RWMutex], a reader must not take
// the read side again while it holds it (a waiting writer would refuse
// it, and wait for the first read side to end); a reader that re-enters
// with its token ([WithToken]) is let in.
type RWMutex struct {
	c    *Client
	w, r target // the writer's and the readers' target: the same Redis key
	lc   lockConfig
}

// RWMutex returns the read-write lock called name. Options are those of
// [Client.Lock]: WithTTL, WithRetry, WithMetadata (writers only),
// WithToken, WithAutoExtend, WithMaxHold and WithFencing (writers only).
func (c *Client) RWMutex(name string, opts ...Option) (*RWMutex, error) {
	if name == "" {
		return nil, invalid("empty read-write lock name")
	}
	key := "rw:" + name
	lc, err := c.callConfig(key, toLock, opts)
	if err != nil {
		return nil, err
	}
	m := &RWMutex{c: c, lc: lc, w: c.target(key)}
	m.w.mode = wire.ModeWrite
	m.r = m.w
	m.r.mode = wire.ModeRead
	return m, nil
}

// Lock takes the write side, waiting as long as ctx allows, in the key's
// wait queue as [Client.Lock] does (readers count as holders: the writer
// waits for the last of them). Errors, and the short first validity of a
// lock a release granted, are those of Client.Lock.
func (m *RWMutex) Lock(ctx context.Context) (*Lock, error) {
	lc := m.lc
	return m.lock(ctx, &lc)
}

func (m *RWMutex) lock(ctx context.Context, lc *lockConfig) (*Lock, error) {
	return m.c.lockQueued(ctx, m.w, lc)
}

// TryLock makes one attempt at the write side, as [Client.TryLock] does.
func (m *RWMutex) TryLock(ctx context.Context) (*Lock, error) {
	return m.c.tryLock(ctx, m.w, &m.lc)
}

// RLock takes the read side, waiting as long as ctx allows in the key's
// wait queue, as [Client.Lock] does: it enters with the readers around it
// once no writer holds or waits ahead of it, woken by the release that
// lets it in. Errors, and the short first validity of a reader let in,
// are those of Client.Lock.
func (m *RWMutex) RLock(ctx context.Context) (*Lock, error) {
	lc := m.lc
	return m.rlock(ctx, &lc)
}

func (m *RWMutex) rlock(ctx context.Context, lc *lockConfig) (*Lock, error) {
	return m.c.lockQueued(ctx, m.r, lc)
}

// TryRLock makes one attempt at the read side. On failure the error is a
// [*QuorumError] matching [ErrNotObtained]: a node's reason is [ErrHeld]
// where a writer holds, [ErrQueued] where a writer waits.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lock, error) {
	return m.c.tryLock(ctx, m.r, &m.lc)
}

// Do takes the write side (waiting as Lock does), runs fn while it is
// extended, and releases it, as [Client.Do] does.
func (m *RWMutex) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	lc := m.lc
	return m.c.do(ctx, &lc, fn, m.lock)
}

// RDo takes the read side (waiting as RLock does), runs fn while it is
// extended, and releases it, as [Client.Do] does.
func (m *RWMutex) RDo(ctx context.Context, fn func(ctx context.Context) error) error {
	lc := m.lc
	return m.c.do(ctx, &lc, fn, m.rlock)
}

// Inspect returns what every node holds: the writer, if any, as for a
// lock ([Client.Inspect]), and the live readers ([NodeState.Readers]).
func (m *RWMutex) Inspect(ctx context.Context) (*KeyState, error) {
	return m.c.Inspect(ctx, m.w.key)
}
