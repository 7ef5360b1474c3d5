package redlock

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestSerialTurnInVirtualTime: a second Unlock that waits for the first's
// quorum round (as Close's does beside Do's) waits durably, so a
// testing/synctest bubble's clock goes on and both return; with the turn a
// sync.Mutex held across the round, the bubble's clock stopped and the
// test hung (the simulator found it). Exactly one of them releases.
func TestSerialTurnInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		l, err := c.Lock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fakes {
			f.mu.Lock()
			f.delay = 100 * time.Millisecond // every round takes 100 ms
			f.mu.Unlock()
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() { errs <- l.Unlock(context.Background()) }()
		}
		first, second := <-errs, <-errs
		if (first == nil) == (second == nil) || !errors.Is(errors.Join(first, second), ErrReleased) {
			t.Fatalf("two Unlocks returned %v and %v; want one nil and one ErrReleased", first, second)
		}
	})
}

// TestSerialTurnsInOrder: callers waiting for the turn get it in the order
// they asked, each after the one before has ended its turn.
func TestSerialTurnsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &Lock{}
		l.turn.enter()
		order := make(chan int, 3)
		for i := range 3 {
			go func() {
				l.turn.enter()
				order <- i
				time.Sleep(time.Millisecond)
				l.turn.leave()
			}()
			synctest.Wait() // i waits before i+1 asks
		}
		l.turn.leave()
		for want := range 3 {
			if got := <-order; got != want {
				t.Fatalf("turn %d went to caller %d", want, got)
			}
		}
		l.turn.enter() // the last has ended its turn
	})
}
