package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// wanGoroutines is how many goroutines lock at once in the WAN measure's
// concurrent Locks (wanShared).
const wanGoroutines = 8

// wanSharedRow is one way of making concurrent Locks at WAN distances: the
// goroutines share one Client, or have one each.
type wanSharedRow struct {
	Name             string
	Cycles           int
	LockP50, LockP99 time.Duration
}

// wanShared has wanGoroutines goroutines lock and unlock fresh keys
// through the proxies at addrs for d, sharing one redlock Client, then
// with a Client each, rounds times interleaved. A Client has one pipeline
// in flight per node (internal/nodeio's stream), so a shared Client's call
// made while a batch is out waits for that batch's round trip: the
// difference between the two rows.
func wanShared(ctx context.Context, addrs []string, rounds int, d time.Duration, res *wanResult) error {
	names := []string{fmt.Sprintf("redlock, 5 nodes, %d goroutines of one Client", wanGoroutines),
		fmt.Sprintf("redlock, 5 nodes, %d goroutines with a Client each", wanGoroutines)}
	locks := make([][]time.Duration, len(names))
	for r := range rounds {
		for _, v := range roundOrder(len(names), r) {
			ls, err := wanConcurrent(ctx, addrs, v == 0, d, fmt.Sprintf("bench:wanpar:%d:%d", r, v))
			if err != nil {
				return fmt.Errorf("%s: %w", names[v], err)
			}
			locks[v] = append(locks[v], ls...)
		}
	}
	for v, name := range names {
		s := sorted(locks[v])
		res.Shared = append(res.Shared, wanSharedRow{Name: name, Cycles: len(s), LockP50: pct(s, 0.5), LockP99: pct(s, 0.99)})
	}
	return nil
}

// wanConcurrent is one round of wanShared: the Lock times of every cycle.
func wanConcurrent(ctx context.Context, addrs []string, shared bool, d time.Duration, prefix string) ([]time.Duration, error) {
	insts := make([]instance, wanGoroutines) // goroutine g locks through insts[g % len(insts)]
	if shared {
		insts = insts[:1]
	}
	defer closeAll(insts)
	for g := range insts {
		in, err := redlockContender(5, "").build(addrs, nil)
		if err != nil {
			return nil, err
		}
		insts[g] = in
		if err := in.cycle(ctx, fmt.Sprintf("%s:warm:%d", prefix, g)); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var (
		mu       sync.Mutex
		locks    []time.Duration
		firstErr error
		wg       sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for g := range wanGoroutines {
		in := insts[g%len(insts)]
		wg.Go(func() {
			for j := 0; time.Now().Before(deadline); j++ {
				l, _, err := wanCycle(ctx, in, fmt.Sprintf("%s:%d:%d", prefix, g, j))
				mu.Lock()
				if err == nil {
					locks = append(locks, l)
				} else if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return locks, firstErr
}
