package integration

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestSemaphorePermitsGrantedByRelease: with default options, Acquire
// calls waiting for a full semaphore (2 permits) are granted a slot by
// the holder's releases, without attempts of their own: each holds a
// different slot by its place's ID. Both slots are released at once, so
// the first waiter, first in both slots' queues, is granted both; it
// keeps one and releases its place's ID in the other, which grants that
// slot to the next waiter. With metadata, each slot holds the waiter's
// metadata beside its ID on every node.
func TestSemaphorePermitsGrantedByRelease(t *testing.T) {
	t.Run("plain", func(t *testing.T) { permitsGrantedByRelease(t, "") })
	t.Run("metadata", func(t *testing.T) { permitsGrantedByRelease(t, "host=w") })
}

func permitsGrantedByRelease(t *testing.T, meta string) {
	nodes := StartNodes(t, 3)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	holder, err := newClient(t, Clients(t, nodes, nil)).Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	var held []*redlock.Lock
	for range 2 {
		l, err := holder.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		heldEverywhere(t, nodes, l.Key(), l.Token()) // (TryAcquire returns at a majority: no waiter's sweep finds the slot free on the last node)
	}
	got := make(chan *redlock.Lock, 2)
	for i := range 2 {
		var opts []redlock.Option
		if meta != "" {
			opts = append(opts, redlock.WithMetadata(meta))
		}
		s, err := newClient(t, Clients(t, nodes, nil)).Semaphore(name, 2, opts...)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			l, err := s.Acquire(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		waitUntil(t, 10*time.Second, "the waiter queued in both slots on every node", func() bool {
			for _, nd := range nodes {
				for _, k := range []string{"sem:" + name + ":0", "sem:" + name + ":1"} {
					if Admin(t, nd).ZCard(ctx, RedisKey(k)+":queue").Val() != int64(i+1) {
						return false
					}
				}
			}
			return true
		})
	}
	var wg sync.WaitGroup
	for _, l := range held {
		wg.Go(func() {
			if err := l.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	a, b := <-got, <-got
	if a == nil || b == nil {
		t.FailNow()
	}
	if a.Key() == b.Key() {
		t.Errorf("both hold slot %s", a.Key())
	}
	for _, l := range []*redlock.Lock{a, b} {
		if !strings.Contains(l.Token(), ".wi") {
			t.Errorf("%s: token %q, not a granted place's ID", l.Key(), l.Token())
		}
		if meta != "" { // (a release's last node may answer after the majority)
			waitUntil(t, 10*time.Second, l.Key()+" held with the token and its metadata on every node", func() bool {
				for _, nd := range nodes {
					v := Admin(t, nd).Get(ctx, RedisKey(l.Key())).Val()
					if strings.TrimPrefix(strings.TrimPrefix(v, l.Token()+"\x00"), "\x02") != meta {
						return false
					}
				}
				return true
			})
		}
		if err := l.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	noKeysLeft(t, nodes, "sem:"+name)
}

// TestFencedSemaphoreGrantedByRelease: with WithFencing and otherwise
// default options, a semaphore's waiter behind another Client's fenced
// permits is granted the slot a permit's release frees, without an
// attempt of its own (it holds by its place's ID, ".wif"), with a fencing
// token above the released permit's, which is every node's counter of
// that slot that granted it. Until 2026-12-04 it was woken to attempt.
func TestFencedSemaphoreGrantedByRelease(t *testing.T) {
	nodes := StartNodes(t, 3)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	holder, err := newClient(t, Clients(t, nodes, nil)).Semaphore(name, 2, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]*redlock.Lock{}
	for range 2 {
		l, err := holder.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held[l.Key()] = l
		heldEverywhere(t, nodes, l.Key(), l.Token())
	}
	waiters, acquires := observedWaiters(t, nodes, 1, redlock.WithFencing())
	s, err := waiters[0].Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	next := lockInBackground(t, s.Acquire)
	slot0 := "sem:" + name + ":0"
	waitUntil(t, 10*time.Second, "the waiter queued in both slots on every node", func() bool {
		for _, nd := range nodes {
			for _, k := range []string{slot0, "sem:" + name + ":1"} {
				if Admin(t, nd).ZCard(ctx, RedisKey(k)+":queue").Val() != 1 {
					return false
				}
			}
		}
		return true
	})
	heardBy(t, nodes, slot0)
	freed := held[slot0]
	if err := freed.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := next()
	if l.Key() != slot0 || !strings.Contains(l.Token(), ".wif") {
		t.Errorf("holds %s with %q: want %s, granted to its place (.wif)", l.Key(), l.Token(), slot0)
	}
	if l.Fence() <= freed.Fence() {
		t.Errorf("fencing token %d, not above the released permit's %d", l.Fence(), freed.Fence())
	}
	counters := 0
	for _, nd := range nodes {
		if c, err := Counter(ctx, Admin(t, nd), RedisKey(slot0)); err == nil && c == l.Fence() {
			counters++
		}
	}
	if counters < 2 {
		t.Errorf("%d nodes' counters of %s at the granted token %d, want a majority", counters, slot0, l.Fence())
	}
	for _, e := range acquires() {
		if !e.LetIn {
			t.Errorf("an acquisition not granted by a release: %+v", e)
		}
	}
	for _, h := range []*redlock.Lock{l, held["sem:"+name+":1"]} {
		if err := h.Unlock(ctx); err != nil {
			t.Error(err)
		}
	}
	noLockKeysLeft(t, nodes, "sem:"+name)
}
