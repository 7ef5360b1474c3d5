package redlock

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestFencingGrows(t *testing.T) {
	c := newTestClient(t, newFakeNodes(5), WithFencing())
	var last uint64
	for i := range 100 {
		l, err := c.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if f := l.Fence(); f <= last || f >= maxFence {
			t.Fatalf("acquisition %d: fence %d after %d", i, f, last)
		}
		last = l.Fence()
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.bg.Wait()
	}
	plain, err := c.TryLock(t.Context(), "other", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Fence() == 0 {
		t.Fatal("WithFencing given to New did not apply")
	}
}

// TestFencingCounterexample: taking the largest counter of a majority is not
// monotonic by itself (the example, 3 nodes): {A,B} locks, a client
// that only reaches A bumps it three times, {A,B} locks again, then {B,C}.
// Without the write-back, {B,C} would hand out a token below the one before.
func TestFencingCounterexample(t *testing.T) {
	fakes := newFakeNodes(3)
	a, b, cNode := fakes[0], fakes[1], fakes[2]
	c := newTestClient(t, fakes, WithFencing())
	minority := newTestClient(t, []*fakeNode{a}, WithFencing())
	lockWith := func(up ...*fakeNode) uint64 {
		t.Helper()
		for _, f := range fakes {
			f.setErr(errFakeDown)
		}
		for _, f := range up {
			f.setErr(nil)
		}
		l, err := c.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		c.bg.Wait()
		if err := l.Unlock(t.Context()); !errors.Is(err, nil) && !errors.Is(err, ErrNotObtained) {
			t.Fatal(err)
		}
		c.bg.Wait()
		return l.Fence()
	}
	t1 := lockWith(a, b)
	for range 3 {
		a.setErr(nil)
		l, err := minority.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(t.Context())
		minority.bg.Wait()
	}
	t2 := lockWith(a, b)
	t3 := lockWith(b, cNode)
	if !(t1 < t2 && t2 < t3) {
		t.Fatalf("tokens %d, %d, %d: want strictly increasing", t1, t2, t3)
	}
}

// TestFencingUnique: nodes that forget their keys grant to everyone at once,
// so holders overlap; still no two of them get the same token.
func TestFencingUnique(t *testing.T) {
	fakes := newFakeNodes(5)
	for _, f := range fakes {
		f.amnesia = true
	}
	c := newTestClient(t, fakes, WithFencing())
	var mu sync.Mutex
	seen := map[uint64]int{}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				l, err := c.TryLock(t.Context(), "k")
				if err != nil {
					continue // a larger token was written back first
				}
				mu.Lock()
				seen[l.Fence()]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) < 50 {
		t.Fatalf("only %d grants: the test did not make holders overlap", len(seen))
	}
	for f, n := range seen {
		if n > 1 {
			t.Fatalf("token %d handed out %d times", f, n)
		}
	}
}

func TestFencingBadCounter(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"not a number", "hello", "not a whole number"},
		{"negative", "-5", "not a whole number"},
		{"near 2^53", fmt.Sprint(maxFence - 2), "2^53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakes := newFakeNodes(3)
			for _, f := range fakes {
				f.set("redlock:{k}:fence", tc.value, -1)
			}
			c := newTestClient(t, fakes, WithFencing())
			_, err := c.TryLock(t.Context(), "k")
			if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrNotObtained saying %q", err, tc.want)
			}
			for _, f := range fakes {
				if _, held := f.value("redlock:{k}"); held {
					t.Fatal("a node granted the lock despite its bad counter")
				}
			}
		})
	}
}

// TestFencingCountsAgainstValidity: the write-back round is part of the
// acquisition's elapsed time.
func TestFencingCountsAgainstValidity(t *testing.T) {
	maxValidity := testTTL - testTTL/100 - 2*time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		fakes[0].delay = maxValidity * 6 / 10 // in the acquire and again in the write-back
		fakes[2].setErr(errFakeDown)
		c := newTestClient(t, fakes, WithFencing(), WithTTL(testTTL), WithNodeTimeout(time.Hour))
		_, err := c.TryLock(t.Context(), "k")
		if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "validity ran out") {
			t.Fatalf("got %v, want a failure for lack of validity", err)
		}
	})
}
