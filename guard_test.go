package redlock

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// restartScenario: a holds k on nodes {0, 1} (node 2 was down); node 0
// restarts without persistence, forgetting a's key; b, which knew every
// node before, then tries k. It returns b's lock or error, and whether a's
// lock is still valid.
func restartScenario(t *testing.T, opts ...Option) (l, held *Lock, fakes []*fakeNode, b *Client, err error) {
	t.Helper()
	fakes = newFakeNodes(3)
	a := newTestClient(t, fakes, opts...)
	b = newTestClient(t, fakes, opts...)
	warm, err := b.TryLock(t.Context(), "warm-up")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Unlock(t.Context())
	b.bg.Wait()
	fakes[2].setErr(errFakeDown)
	held, err = a.TryLock(t.Context(), "k", WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	a.bg.Wait()
	fakes[2].setErr(nil)
	fakes[0].restart()
	l, err = b.TryLock(t.Context(), "k", WithTTL(time.Minute))
	return l, held, fakes, b, err
}

func TestRestartGuard(t *testing.T) {
	synctest.Test(t, testRestartGuard)
}

func testRestartGuard(t *testing.T) {
	rec := &recorder{}
	l, held, fakes, b, err := restartScenario(t, WithRestartGuard(time.Minute), WithObserver(rec.Observe))
	if err == nil {
		t.Fatalf("b got the lock (fence %d) while a holds it with %v left: the restarted node's grant counted", l.Fence(), held.Validity())
	}
	if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "restarted recently") || !strings.Contains(err.Error(), "fake0") {
		t.Fatalf("got %v, want ErrNotObtained naming fake0's restart", err)
	}
	// Observers see the discounted grant as a failure, not as "ok".
	events := rec.snapshot()
	last := events[len(events)-1]
	if last.Kind != EventAcquire || last.Err == nil || !errors.Is(last.Nodes[0].Err, ErrNodeRestarted) {
		t.Fatalf("refused event: %+v", last)
	}
	// After the period, the restarted node counts again.
	// a's Unlock finds its key gone from node 0 (forgotten) and never on
	// node 2: the lock had in truth expired.
	b.bg.Wait() // b's failed attempt has released what it got
	if err := held.Unlock(t.Context()); !errors.Is(err, ErrExpired) {
		t.Fatalf("a's Unlock: got %v, want ErrExpired", err)
	}
	time.Sleep(time.Minute)
	for _, f := range fakes {
		f.del("redlock:{k}")
	}
	fakes[1].setErr(errFakeDown) // only {0, 2}: node 0 must count
	c := newTestClient(t, fakes, WithRestartGuard(time.Minute))
	if _, err := c.TryLock(t.Context(), "k"); err != nil {
		t.Fatalf("a new Client, which never knew node 0 before: %v", err)
	}
}

// TestRestartGuardOffIsUnsafe is the canary: the same scenario without the
// guard gives two holders, so the test above proves something.
func TestRestartGuardOffIsUnsafe(t *testing.T) {
	l, held, _, _, err := restartScenario(t, WithRestartGuard(0))
	if err != nil {
		t.Fatalf("without the guard b should have got the lock (the unsafe case this test shows): %v", err)
	}
	if held.Validity() <= 0 || l.Validity() <= 0 {
		t.Fatal("the scenario did not make two valid holders")
	}
}

func TestRestartGuardOption(t *testing.T) {
	fakes := newFakeNodes(3)
	nodes := []node{fakes[0], fakes[1], fakes[2]}
	for _, d := range []time.Duration{-1, maxTTL + 1} {
		if _, err := newClient(nodes, []Option{WithRestartGuard(d)}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("WithRestartGuard(%v): got %v, want ErrInvalidArgument", d, err)
		}
	}
	c, err := newClient(nodes, []Option{WithTTL(7 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(t.Context())
	if c.guard == nil || c.guard.period != 7*time.Second {
		t.Fatalf("default guard: %+v, want on with the default TTL as its period", c.guard)
	}
}
