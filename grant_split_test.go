package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
)

// TestGrantsSplitBetweenWaiters: three Lock calls queue together (tickets
// a < b < c) behind a holder, and their joins reach the nodes in
// different orders: on nodes 0 and 1 only c's has arrived when the
// holder's release does, on node 2 b's and c's, on nodes 3 and 4 all
// three (a's and b's land 3 ms after the release). Each release grants the key to the first waiter it finds: c on
// two nodes, b on one, a on two. No one has a majority, and every grant
// stays until its place's lapse, a lease. The waiter whose grants can no
// longer make a majority (c: node 2 is b's with a first, nodes 3 and 4
// a's with b first) gives them back, and those nodes grant the key to a,
// now first there: a holds a few round trips after the release, and b
// and c follow. Before, the first of them held a lease (1 s) after the
// release; so it does under the mutant that keeps the grants.
func TestGrantsSplitBetweenWaiters(t *testing.T) {
	if broke := grantsSplitBroken(lockSplit)(t); broke != "" {
		t.Fatal(broke)
	}
}

// TestSemaphoreGrantsSplitBetweenWaiters: the same schedule for a
// semaphore of 2 permits whose two holders release together: each slot's
// release grants it to each node's first waiter, so both slots split as
// the key did, and no waiter had a permit until their places lapsed (1
// s), under the mutant too. Each slot's stuck grants are given back on
// their own.
func TestSemaphoreGrantsSplitBetweenWaiters(t *testing.T) {
	if broke := grantsSplitBroken(semaphoreSplit)(t); broke != "" {
		t.Fatal(broke)
	}
}

// TestSetGrantsSplitBetweenWaiters: the same schedule for sets of two
// keys: the holder's release splits both keys between the sets as it
// split the one key, and the sets held a lease after it, under the
// mutant too. A set whose grants on a key can never make a majority
// gives back every key's.
func TestSetGrantsSplitBetweenWaiters(t *testing.T) {
	if broke := grantsSplitBroken(setSplit)(t); broke != "" {
		t.Fatal(broke)
	}
}

// TestRWMutexGrantsSplitBetweenWaiters: the same schedule for a
// read-write lock, a writer holding and a reader among the waiters: the
// release lets the reader in on the nodes where it is first and grants
// a writer elsewhere, and no one held for a lease. A writer counts the
// nodes where readers hold, another waiter first, against it; a reader,
// the nodes where a writer is first.
func TestRWMutexGrantsSplitBetweenWaiters(t *testing.T) {
	for _, kinds := range []string{"wrww", "wwrw", "wwwr"} {
		t.Run(kinds, func(t *testing.T) {
			rwKinds = kinds
			if broke := grantsSplitBroken(rwSplit)(t); broke != "" {
				t.Fatal(broke)
			}
		})
	}
}

// rwKinds: what rwSplit's callers take, in order (r: read, w: write).
var rwKinds = "wrww"

func TestGrantsSplitMutantsCaught(t *testing.T) {
	requireCaught(t, []scheduledMutant{
		{"grants that can no longer make a majority are kept until they lapse", mutGrantsStuckWait, grantsSplitBroken(lockSplit)},
		{"a semaphore's slot grants that can no longer make a majority are kept", mutGrantsStuckWait, grantsSplitBroken(semaphoreSplit)},
		{"a set's grants that can no longer make a majority are kept", mutGrantsStuckWait, grantsSplitBroken(setSplit)},
		{"a reader's let-ins and writers' grants that can no longer make a majority are kept", mutGrantsStuckWait, grantsSplitBroken(rwSplit)},
	})
}

// splitAcquire takes what the split schedule's holders and waiters take:
// the mutex "k" (holders: how many hold it before the release), a permit
// of a semaphore, or the set of keys "k1" and "k2".
type splitAcquire struct {
	holders int
	// acquire takes it for the i-th caller: the holders first, then the
	// waiters in ticket order
	acquire func(ctx context.Context, c *Client, i int) (*Lock, error)
}

var (
	lockSplit      = splitAcquire{1, func(ctx context.Context, c *Client, _ int) (*Lock, error) { return c.Lock(ctx, "k") }}
	semaphoreSplit = splitAcquire{2, func(ctx context.Context, c *Client, _ int) (*Lock, error) {
		s, err := c.Semaphore("k", 2)
		if err != nil {
			return nil, err
		}
		return s.Acquire(ctx)
	}}
	// rwSplit: a read-write lock's writer holds, and the waiters a, b, c
	// read or write as rwKinds[1:] says.
	rwSplit = splitAcquire{1, func(ctx context.Context, c *Client, i int) (*Lock, error) {
		m, err := c.RWMutex("k")
		if err != nil {
			return nil, err
		}
		if rwKinds[i] == 'r' {
			return m.RLock(ctx)
		}
		return m.Lock(ctx)
	}}
	setSplit = splitAcquire{1, func(ctx context.Context, c *Client, _ int) (*Lock, error) {
		m, err := c.MultiLock([]string{"k1", "k2"})
		if err != nil {
			return nil, err
		}
		return m.Lock(ctx)
	}}
)

// grantsSplitBroken returns a run of the schedule of
// TestGrantsSplitBetweenWaiters for what sa takes, which returns what
// broke ("" if nothing did): a Lock call that did not hold within 100 ms
// of the release, or an error.
func grantsSplitBroken(sa splitAcquire) func(t *testing.T) string {
	return func(t *testing.T) string {
		var broke string
		synctest.Test(t, func(t *testing.T) {
			took := grantsSplit(t, sa)
			if len(took) != 3 {
				broke = "a Lock call failed"
				return
			}
			t.Logf("held after the release: %v", took)
			for i, d := range took {
				if d >= 100*time.Millisecond {
					broke = fmt.Sprintf("the Lock that held %s held %v after the release (a lease is 1 s)", []string{"first", "second", "third"}[i], d)
					return
				}
			}
		})
		return broke
	}
}

// splitPlan says which of the three waiters' connections to which nodes
// lag: their joins there (and what they send after them, in order) land
// only after the holders' release, after.
type splitPlan struct {
	late  [5][3]bool // per node, per waiter (a, b, c)
	after time.Duration
}

// theSplit is TestGrantsSplitBetweenWaiters' plan: a's and b's joins on
// nodes 0 and 1, and a's on node 2, land 3 ms after the release.
var theSplit = splitPlan{late: [5][3]bool{{true, true}, {true, true}, {true}}, after: 3 * time.Millisecond}

// grantsSplit runs TestGrantsSplitBetweenWaiters' schedule and returns,
// in the order they held, how long after the holders' release each of
// the three Lock calls held the key (sa: what they take).
func grantsSplit(t *testing.T, sa splitAcquire) []time.Duration {
	return grantsSplitBy(t, sa, theSplit)
}

// grantsSplitBy is grantsSplit with the plan p. Each waiter has a
// connection of its own to each node (fifoNode), on which its calls run
// in the order it sent them, as on a node's stream.
func grantsSplitBy(t *testing.T, sa splitAcquire, p splitPlan) []time.Duration {
	fakes := newFakeNodes(5)
	var joins atomic.Int64 // when the late joins land
	joins.Store(time.Now().Add(time.Hour).UnixNano())
	ws := make([]*Client, 3)
	for j := range ws {
		nodes := make([]node, len(fakes))
		for i, f := range fakes {
			n := &fifoNode{fakeNode: &fakeNode{id: f.id, index: i, mem: f.mem, delay: 100 * time.Microsecond}}
			n.hold = func(o *wire.Op) { // its joins, and any look before then
				if p.late[i][j] && o.Kind == wire.OpQueue && o.Place != nil && o.Place.Ticket != 0 {
					for time.Now().UnixNano() < joins.Load() {
						time.Sleep(time.Millisecond)
					}
				}
			}
			nodes[i] = n
		}
		c, err := newClient(nodes, []Option{WithAnyNodeCount(), WithNodeTimeout(5 * time.Second)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		ws[j] = c
	}
	for _, f := range fakes {
		f.delay = 100 * time.Microsecond
	}
	ctx := t.Context()
	var held []*Lock
	for i := range sa.holders {
		l, err := sa.acquire(ctx, newTestClient(t, fakes), i)
		require.NoError(t, err)
		held = append(held, l)
	}
	var mu sync.Mutex
	var released time.Time
	var took []time.Duration
	var holding atomic.Int32 // the waiters holding now
	var wg sync.WaitGroup
	for i, c := range ws {
		wg.Go(func() {
			l, err := sa.acquire(ctx, c, sa.holders+i)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			took = append(took, time.Since(released))
			mu.Unlock()
			// No more hold at once than the holders did (the read-write
			// schedules have one reader at most).
			if n := holding.Add(1); int(n) <= sa.holders {
				time.Sleep(time.Millisecond)
			} else {
				t.Errorf("%d hold at once: a given-back grant counted", n)
			}
			holding.Add(-1)
			assert.NoError(t, l.Unlock(context.WithoutCancel(ctx)))
		})
		time.Sleep(time.Millisecond) // tickets a < b < c
	}
	time.Sleep(10 * time.Millisecond)
	mu.Lock()
	released = time.Now()
	mu.Unlock()
	joins.Store(released.Add(p.after).UnixNano())
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
	wg.Wait()
	return took
}

// fifoNode is one Client's connection to a fake node: its calls run on
// the node in the order the Client sent them, each after the one before
// has run, as on the node's stream (a fakeNode orders only a batch's).
type fifoNode struct {
	*fakeNode
	mu   sync.Mutex
	last chan struct{}
}

func (n *fifoNode) Start(c nodeio.Call) { n.StartAll([]nodeio.Call{c}) }

func (n *fifoNode) StartAll(calls []nodeio.Call) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range calls {
		t := turn{after: n.last, done: make(chan struct{})}
		n.last = t.done
		n.startPaused(c, 0, t)
	}
}
