package redlock

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Tests of the root package run the library over in-memory fake nodes
// (fake_test.go). Those about time run inside synctest.Test, in virtual
// time: they take microseconds, cannot race the scheduler, and may assert
// exact durations. Behaviour against real Redis is tested in integration/.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTTL = 10 * time.Second

// lockAll takes the lock and waits until every node has answered, for tests
// that go on to move the clock or break nodes.
func lockAll(t *testing.T, c *Client, key string, opts ...Option) *Lock {
	t.Helper()
	l, err := c.TryLock(t.Context(), key, opts...)
	require.NoError(t, err)
	c.bg.Wait()
	return l
}

func TestNew(t *testing.T) {
	many := make([]redis.UniversalClient, wire.FenceModulus)
	for i := range many {
		cl := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", 1+i)})
		t.Cleanup(func() { cl.Close() })
		many[i] = cl
	}
	clients := many[:5]
	sameAddr := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { sameAddr.Close() })
	for _, tc := range []struct {
		name    string
		clients []redis.UniversalClient
		opts    []Option
		ok      bool
	}{
		{"three", clients[:3], nil, true},
		{"five", clients, nil, true},
		{"none", nil, nil, false},
		{"none, any count", nil, []Option{WithAnyNodeCount()}, false},
		{"one", clients[:1], nil, false},
		{"one, any count", clients[:1], []Option{WithAnyNodeCount()}, true},
		{"four", clients[:4], nil, false},
		{"four, any count", clients[:4], []Option{WithAnyNodeCount()}, true},
		{"nil client", []redis.UniversalClient{clients[0], nil, clients[2]}, nil, false},
		{"typed nil client", []redis.UniversalClient{clients[0], (*redis.Client)(nil), clients[2]}, nil, false},
		{"same client twice", []redis.UniversalClient{clients[0], clients[1], clients[0]}, nil, false},
		{"same address twice", []redis.UniversalClient{clients[0], clients[1], sameAddr}, nil, false},
		{"63, the most", many[:63], nil, true},
		{"64: residue 63 is the fence proposals'", many, []Option{WithAnyNodeCount()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.clients, tc.opts...)
			if !tc.ok {
				require.ErrorIs(t, err, ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			defer c.Close(t.Context())
			require.Equal(t, "127.0.0.1:1", c.nodes[0].Name())
		})
	}
}

func TestCancelledContextSendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		l, err := c.TryLock(t.Context(), "k")
		require.NoError(t, err)
		synctest.Wait() // TryLock returns at a majority: the last node's call lands
		before := fakes[0].calls.Load()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		for name, f := range map[string]func() error{
			"Lock":    func() error { _, err := c.Lock(ctx, "j"); return err },
			"TryLock": func() error { _, err := c.TryLock(ctx, "j"); return err },
			"Extend":  func() error { return l.Extend(ctx, time.Second) },
			"Unlock":  func() error { return l.Unlock(ctx) },
			"Inspect": func() error { _, err := c.Inspect(ctx, "k"); return err },
		} {
			require.ErrorIs(t, f(), context.Canceled, name)
		}
		synctest.Wait()
		require.Equal(t, before, fakes[0].calls.Load(), "a cancelled context sent calls")
		require.NoError(t, l.Unlock(t.Context()), "Unlock after the cancelled one")
	})
}

// TestMutualExclusionFakes: many goroutines contending through the full
// client (Lock: the queue and hand-off) never overlap in the critical
// section (run with -race), and every Lock gets the lock. (With TryLock
// and a count that had only to be positive, every one of 800 tries was
// refused once under -fakeyield: split votes.)
func TestMutualExclusionFakes(t *testing.T) {
	c := newTestClient(t, newFakeNodes(5))
	var inside, overlaps, acquired atomic.Int32
	var wg sync.WaitGroup
	const goroutines, each = 16, 20
	for range goroutines {
		wg.Go(func() {
			for range each {
				l, err := c.Lock(t.Context(), "k")
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				acquired.Add(1)
				inside.Add(-1)
				if err := l.Unlock(t.Context()); err != nil {
					overlaps.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Zero(t, overlaps.Load(), "overlaps in %d acquisitions", acquired.Load())
	require.EqualValues(t, goroutines*each, acquired.Load())
}

// BenchmarkLockUnlock measures the library's own cost per Lock+Unlock cycle
// over worker nodes (they run nothing: newBenchClient); round trips to
// real Redis are benchmarked in integration/.
//
// nodes=5/observer adds an observer that does nothing, to show what events
// cost; without one there is no timing and no event.
func BenchmarkLockUnlock(b *testing.B) {
	for _, tc := range []struct {
		name string
		n    int
		opts []Option
	}{
		{"nodes=1", 1, nil},
		{"nodes=3", 3, nil},
		{"nodes=5", 5, nil},
		{"nodes=5/observer", 5, []Option{WithObserver(Observer(func(Event) {}))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := newBenchClient(b, tc.n, tc.opts...)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.Lock(ctx, "k")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLockUnlockParallel is the library's own cost per cycle under
// concurrency: 32 or 256 goroutines (b.SetParallelism) lock and unlock
// keys of their own through one Client over 5 worker nodes, each a
// goroutine that answers calls in the order they came, running nothing,
// as a node's stream hands replies over from a goroutine of its own. With
// both cores busy, ns/op is about half the CPU a cycle costs the client
// beside go-redis and the network (integration's benchmark of the same
// name has those).
func BenchmarkLockUnlockParallel(b *testing.B) {
	for _, goroutines := range []int{32, 256} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			nodes := make([]node, 5)
			for i := range nodes {
				nodes[i] = newWorkerNode(b, fmt.Sprint("worker", i))
			}
			c, err := newClient(nodes, []Option{WithAnyNodeCount()})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = c.Close(context.Background()) })
			var worker atomic.Int64
			b.SetParallelism(max(goroutines/runtime.GOMAXPROCS(0), 1))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx, w := context.Background(), worker.Add(1)
				for i := 0; pb.Next(); i++ {
					l, err := c.Lock(ctx, fmt.Sprintf("par:%d:%d", w, i%64))
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Unlock(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// workerNode answers calls on one goroutine of its own, in the order they
// came, with the success each op asks for (instantNode's answer).
type workerNode struct {
	instantNode
	calls chan nodeio.Call
}

func newWorkerNode(b *testing.B, id string) *workerNode {
	n := &workerNode{instantNode{id}, make(chan nodeio.Call, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range n.calls {
			c.To.Deliver(c.Index, n.do(c.Ctx, c.Op))
		}
	}()
	b.Cleanup(func() { close(n.calls); <-done })
	return n
}

func (n *workerNode) Start(c nodeio.Call) { n.calls <- c }
