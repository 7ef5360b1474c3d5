package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// attempts counts acquisition attempts through the observer hook.
type attempts struct{ acquired, refused atomicInt }

type atomicInt struct {
	mu sync.Mutex
	n  int
}

func (a *atomicInt) add() { a.mu.Lock(); a.n++; a.mu.Unlock() }
func (a *atomicInt) get() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

func (a *attempts) Observe(e redlock.Event) {
	switch {
	case e.Kind != redlock.EventAcquire:
	case e.Err == nil:
		a.acquired.add()
	default:
		a.refused.add()
	}
}

// BenchmarkHandoff: 4 goroutines contend for one key on 5 nodes, with
// default options, each holding it 1 ms then going straight back for it. It
// reports the hand-off gap (start of Unlock to the next holder's Lock
// returning), the share of acquisitions that went to another goroutine than
// the last holder, attempts per acquisition, and Lock's p50 and p99.
// clients=1: the goroutines share one Client (the hand-off is local);
// clients=4: each has its own, as separate processes would (the hand-off
// goes through the nodes' release notices).
//
//	go test ./integration -run '^$' -bench Handoff -benchtime 2000x -count 5
func BenchmarkHandoff(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) { benchHandoff(b, n) })
	}
}

func benchHandoff(b *testing.B, nclients int) {
	nodes := StartNodes(b, 5)
	count := &attempts{}
	clients := make([]*redlock.Client, nclients)
	for i := range clients {
		clients[i] = newClient(b, Clients(b, nodes, readmeNodes), redlock.WithObserver(count.Observe))
	}
	key := fmt.Sprintf("bench:handoff:%d", time.Now().UnixNano())
	var (
		mu          sync.Mutex
		done        int
		lastHolder  = -1
		unlockStart time.Time
		gaps, locks latencies
		toOther     int
	)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 4 {
		c := clients[g%nclients]
		wg.Go(func() {
			for {
				start := time.Now()
				l, err := c.Lock(context.Background(), key)
				if err != nil {
					b.Error(err)
					return
				}
				now := time.Now()
				mu.Lock()
				if done >= b.N {
					mu.Unlock()
					_ = l.Unlock(context.Background())
					return
				}
				done++
				locks = append(locks, now.Sub(start))
				if lastHolder >= 0 {
					gaps = append(gaps, now.Sub(unlockStart))
					if g != lastHolder {
						toOther++
					}
				}
				lastHolder = g
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				unlockStart = time.Now()
				mu.Unlock()
				if err := l.Unlock(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	gaps.report(b, "gap")
	locks.report(b, "lock")
	if len(gaps) > 0 {
		b.ReportMetric(float64(toOther)/float64(len(gaps)), "to-other")
	}
	b.ReportMetric(float64(count.acquired.get()+count.refused.get())/float64(max(count.acquired.get(), 1)), "attempts/acq")
}
