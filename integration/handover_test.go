package integration

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestHandOverInOneClient: goroutines of one Client contend for a key on
// real redis-servers, with default options. Where the next waiter is the
// releasing Client's own, Unlock sends that waiter's attempt in the
// release's batch (Event.HandedOver); the node's stream runs the release
// first, which reserves the key for the first waiter, and then the
// attempt, which the queue's gate grants. So no handed attempt is
// refused, and the waiters never overlap.
func TestHandOverInOneClient(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	var handed, acquired atomic.Int64
	c := newClient(t, Clients(t, nodes, nil), redlock.WithObserver(func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.HandedOver {
			handed.Add(1)
			if e.Err != nil {
				t.Errorf("a handed attempt was refused: %v", e.Err)
			}
		}
	}))
	var inside atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				l, err := c.Lock(ctx, key)
				cancel()
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					t.Error("two holders at once")
				}
				time.Sleep(500 * time.Microsecond)
				inside.Add(-1)
				acquired.Add(1)
				if err := l.Unlock(context.Background()); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d acquisitions, %d of them handed over by an Unlock of the same Client", acquired.Load(), handed.Load())
	if handed.Load() == 0 {
		t.Error("no hand-over in 100 acquisitions by 4 goroutines of one Client")
	}
}
