package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// BenchmarkSemaphore: an uncontended permit (Acquire+Unlock) beside the
// mutex's cycle, on the same 5 nodes: one slot; 8 slots, all free (the
// first slot tried is free); 8 slots with 4 held elsewhere (a sweep tries
// held slots first half the time, one attempt each).
func BenchmarkSemaphore(b *testing.B) {
	nodes := StartNodes(b, 5)
	c := newClient(b, Clients(b, nodes, readmeNodes))
	ctx := context.Background()
	b.Run("mutex", func(b *testing.B) { lockCycles(b, c) })
	for _, tc := range []struct {
		name          string
		permits, held int
	}{{"permits=1", 1, 0}, {"permits=8", 8, 0}, {"permits=8/held=4", 8, 4}} {
		b.Run(tc.name, func(b *testing.B) {
			name := fmt.Sprintf("bench:%s:%d", tc.name, time.Now().UnixNano())
			s, err := c.Semaphore(name, tc.permits, redlock.WithTTL(time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			other := newClient(b, Clients(b, nodes, readmeNodes))
			for range tc.held {
				// Held by another Client for the whole run.
				so, err := other.Semaphore(name, tc.permits, redlock.WithTTL(time.Hour))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := so.TryAcquire(ctx); err != nil {
					b.Fatal(err)
				}
			}
			takeCycles(b, s.Acquire)
		})
	}
}

// BenchmarkMultiLock: a Lock+Unlock cycle of a multi-key lock on 5 nodes
// beside the mutex's: one script per node either way, over more keys.
func BenchmarkMultiLock(b *testing.B) {
	nodes := StartNodes(b, 5)
	c := newClient(b, Clients(b, nodes, readmeNodes))
	b.Run("mutex", func(b *testing.B) { lockCycles(b, c) })
	for _, n := range []int{2, 8, 32} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprintf("bench:multi:%d:%d", time.Now().UnixNano(), i)
			}
			m, err := c.MultiLock(keys)
			if err != nil {
				b.Fatal(err)
			}
			takeCycles(b, m.Lock)
		})
	}
}

// BenchmarkRWMutex: a read-write lock's cycles on 5 nodes beside the
// mutex's: the write side (the mutex's script and a readers check), the
// read side alone, and the read side while 8 other readers hold.
func BenchmarkRWMutex(b *testing.B) {
	nodes := StartNodes(b, 5)
	c := newClient(b, Clients(b, nodes, readmeNodes))
	ctx := context.Background()
	b.Run("mutex", func(b *testing.B) { lockCycles(b, c) })
	for _, tc := range []struct {
		name    string
		write   bool
		readers int
	}{{"write", true, 0}, {"read", false, 0}, {"read/readers=8", false, 8}} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := c.RWMutex(fmt.Sprintf("bench:%s:%d", tc.name, time.Now().UnixNano()), redlock.WithTTL(time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			for range tc.readers {
				if _, err := m.TryRLock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			take := m.RLock
			if tc.write {
				take = m.Lock
			}
			takeCycles(b, take)
		})
	}
}
