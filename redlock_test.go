package redlock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testTTL = 10 * time.Second

// waitFor fails the test if done is not closed within a generous bound: it
// turns "the library waited for a hung node" into a failure instead of a hang.
func waitFor(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return: it waited for a node that never answers", what)
	}
}

// TestQuorumMasks runs every combination of granting, refusing and failing
// nodes for N = 3, 5 and 7: the lock is obtained exactly when a majority
// granted, a failed attempt leaves none of its keys behind, and a foreign
// holder's key is never touched.
func TestQuorumMasks(t *testing.T) {
	for _, n := range []int{3, 5, 7} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			combos := int(math.Pow(3, float64(n)))
			for mask := range combos {
				clk := newFakeClock()
				fakes := newFakeNodes(n, clk)
				kinds := make([]int, n) // 0 grants, 1 refuses (held by another token), 2 fails
				grants := 0
				for i, m := 0, mask; i < n; i, m = i+1, m/3 {
					kinds[i] = m % 3
					switch kinds[i] {
					case 0:
						grants++
					case 1:
						fakes[i].set("redlock:{k}", "other", time.Minute)
					case 2:
						fakes[i].setErr(errFakeDown)
					}
				}
				c := newTestClient(t, fakes, clk)
				l, err := c.TryLock(t.Context(), "k")
				if want := grants >= n/2+1; (err == nil) != want {
					t.Fatalf("kinds %v: got err %v, want success %v", kinds, err, want)
				}
				if err != nil {
					var qe *QuorumError
					if !errors.As(err, &qe) || !errors.Is(err, ErrNotObtained) {
						t.Fatalf("kinds %v: got %v, want a QuorumError matching ErrNotObtained", kinds, err)
					}
					// Fail-fast may decide before every grant arrived.
					if qe.Granted > grants || qe.Quorum != n/2+1 || len(qe.Nodes)+qe.Granted != n {
						t.Fatalf("kinds %v: got granted %d quorum %d nodes %d", kinds, qe.Granted, qe.Quorum, len(qe.Nodes))
					}
				} else if err := l.Unlock(t.Context()); err != nil {
					t.Fatalf("kinds %v: Unlock: %v", kinds, err)
				}
				c.bg.Wait()
				for i, f := range fakes {
					v, held := f.value("redlock:{k}")
					if kinds[i] == 1 && v != "other" {
						t.Fatalf("kinds %v: node %d: foreign holder's key is %q, want it untouched", kinds, i, v)
					}
					if kinds[i] == 0 && held {
						t.Fatalf("kinds %v: node %d still holds %q after the attempt ended", kinds, i, v)
					}
				}
			}
		})
	}
}

// lockAll takes the lock and waits until every node has answered, for tests
// that go on to move the clock or break nodes.
func lockAll(t *testing.T, c *Client, key string, opts ...LockOption) *Lock {
	t.Helper()
	l, err := c.TryLock(t.Context(), key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c.bg.Wait()
	return l
}

func TestValidityWindow(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk)
	start := clk.Now()
	l, err := c.TryLock(t.Context(), "k", WithTTL(testTTL))
	if err != nil {
		t.Fatal(err)
	}
	want := start.Add(testTTL - testTTL/100 - 2*time.Millisecond)
	if got := l.Until(); !got.Equal(want) {
		t.Fatalf("Until: got %v, want %v", got, want)
	}
	clk.Advance(time.Second)
	if got, want := l.Validity(), want.Sub(clk.Now()); got != want {
		t.Fatalf("Validity: got %v, want %v", got, want)
	}
	clk.Advance(testTTL)
	if got := l.Validity(); got != 0 {
		t.Fatalf("Validity after expiry: got %v, want 0", got)
	}
}

// TestValidityUsedUp: a majority that arrives after the validity ran out is a
// failed attempt, and the keys it created are released.
func TestValidityUsedUp(t *testing.T) {
	maxValidity := testTTL - testTTL/100 - 2*time.Millisecond
	for _, tc := range []struct {
		name    string
		elapsed time.Duration
		ok      bool
	}{
		{"well inside", 100 * time.Millisecond, true},
		{"just inside", maxValidity - time.Nanosecond, true},
		{"exactly at the end", maxValidity, false},
		{"past the end", testTTL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			fakes := newFakeNodes(3, clk)
			fakes[0].advance = tc.elapsed // the slow node of the majority {0, 1}
			fakes[2].setErr(errFakeDown)
			c := newTestClient(t, fakes, clk)
			_, err := c.TryLock(t.Context(), "k", WithTTL(testTTL))
			if (err == nil) != tc.ok {
				t.Fatalf("got %v, want success %v", err, tc.ok)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "validity ran out") {
					t.Fatalf("got %q, want it to say the validity ran out", err)
				}
				c.bg.Wait()
				for i, f := range fakes {
					if v, held := f.value("redlock:{k}"); held {
						t.Fatalf("node %d still holds %q", i, v)
					}
				}
			}
		})
	}
}

func TestDrift(t *testing.T) {
	start := time.Unix(0, 0)
	for _, tc := range []struct {
		ttl     time.Duration
		factor  float64
		elapsed time.Duration
		want    time.Duration
	}{
		{10 * time.Second, 0.01, 0, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, 0.01, 100 * time.Millisecond, 10*time.Second - 202*time.Millisecond},
		{10 * time.Second, 0, 0, 10*time.Second - 2*time.Millisecond},
		{time.Second, 0.5, 0, 498 * time.Millisecond},
		{time.Second, 0.01, time.Second, 0}, // clamped
		{3 * time.Millisecond, 0, 0, time.Millisecond},
	} {
		if got := validity(tc.ttl, tc.factor, start, start.Add(tc.elapsed)); got != tc.want {
			t.Errorf("validity(%v, %v, elapsed %v): got %v, want %v", tc.ttl, tc.factor, tc.elapsed, got, tc.want)
		}
	}
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		want   bool
	}{
		{2 * time.Millisecond, 0, false},
		{2*time.Millisecond + 1, 0, true},
		{2 * time.Millisecond, 0.5, false},
		{4 * time.Millisecond, 0.5, false},
		{5 * time.Millisecond, 0.5, true},
	} {
		if got := canBeValid(tc.ttl, tc.factor); got != tc.want {
			t.Errorf("canBeValid(%v, %v): got %v, want %v", tc.ttl, tc.factor, got, tc.want)
		}
	}
}

// TestReturnsOnMajority: Lock does not wait for nodes that have not answered
// once a majority granted, even if they never honour the context.
func TestReturnsOnMajority(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(5, clk)
	gate := make(chan struct{})
	fakes[1].setGate(gate)
	fakes[3].setGate(gate)
	c := newTestClient(t, fakes, clk, WithNodeTimeout(time.Hour))
	done := make(chan struct{})
	var l *Lock
	var err error
	go func() { defer close(done); l, err = c.TryLock(context.Background(), "k") }()
	waitFor(t, done, "TryLock")
	close(gate)
	if err != nil {
		t.Fatal(err)
	}
	c.bg.Wait() // the two late grants belong to our lock
	for i, f := range fakes {
		if v, _ := f.value("redlock:{k}"); v != l.Token() {
			t.Fatalf("node %d: got %q, want our token", i, v)
		}
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	c.bg.Wait() // Unlock returns once a majority confirmed
	for i, f := range fakes {
		if _, held := f.value("redlock:{k}"); held {
			t.Fatalf("node %d still holds the key after Unlock", i)
		}
	}
}

// TestGrantBehindRelease: a node's grant arrives after Unlock's release has
// already run on that node and found nothing; the grant must not stay
// behind until its TTL.
func TestGrantBehindRelease(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	gate := make(chan struct{})
	fakes[2].acqGate = gate // the acquire is held up; the release is not
	c := newTestClient(t, fakes, clk)
	l, err := c.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for fakes[2].releases() == 0 { // the release reached node 2 first …
		time.Sleep(time.Millisecond)
	}
	close(gate) // … and then the grant lands
	c.bg.Wait()
	if v, held := fakes[2].value("redlock:{k}"); held {
		t.Fatalf("the late grant %q stayed behind the release", v)
	}
}

// TestFailsFast: once a majority is impossible the attempt ends without
// waiting for the rest.
func TestFailsFast(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(5, clk)
	gate := make(chan struct{})
	defer close(gate)
	fakes[0].setGate(gate)
	fakes[1].setGate(gate)
	for _, f := range fakes[2:] {
		f.setErr(errFakeDown)
	}
	c := newTestClient(t, fakes, clk, WithNodeTimeout(time.Hour))
	done := make(chan struct{})
	var err error
	go func() { defer close(done); _, err = c.TryLock(context.Background(), "k") }()
	waitFor(t, done, "TryLock")
	var qe *QuorumError
	if !errors.As(err, &qe) || len(qe.Nodes) != 5 {
		t.Fatalf("got %v, want a QuorumError listing all 5 nodes", err)
	}
	for _, ne := range qe.Nodes[2:] {
		if !errors.Is(ne.Err, errFakeDown) {
			t.Fatalf("node %s: got %v, want its own error", ne.Node, ne.Err)
		}
	}
}

// TestNodeTimeout: a node that ignores its context is cut off at the node
// timeout; its timeout is not the caller's, and its late grant is released.
func TestNodeTimeout(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	gate := make(chan struct{})
	fakes[2].setGate(gate)
	fakes[1].set("redlock:{k}", "other", time.Minute)
	c := newTestClient(t, fakes, clk, WithNodeTimeout(20*time.Millisecond))
	done := make(chan struct{})
	var err error
	go func() { defer close(done); _, err = c.TryLock(t.Context(), "k") }()
	waitFor(t, done, "TryLock")
	if !errors.Is(err, ErrNotObtained) {
		t.Fatalf("got %v, want ErrNotObtained", err)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v: one node's timeout must not look like the caller's deadline", err)
	}
	var qe *QuorumError
	if !errors.As(err, &qe) || qe.Nodes[len(qe.Nodes)-1].Node != "fake2" || !errors.Is(qe.Nodes[len(qe.Nodes)-1].Err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want fake2 listed with a timeout", err)
	}
	if _, held := fakes[0].value("redlock:{k}"); held {
		t.Fatal("node 0 still holds the failed attempt's key")
	}
	close(gate) // the hung node now grants, after the attempt ended
	c.bg.Wait()
	if v, held := fakes[2].value("redlock:{k}"); held {
		t.Fatalf("late grant left %q behind", v)
	}
}

func TestCallerDeadline(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	gate := make(chan struct{})
	defer close(gate)
	fakes[2].setGate(gate)
	fakes[1].setErr(errFakeDown)
	c := newTestClient(t, fakes, clk, WithNodeTimeout(time.Hour))
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	_, err := c.Lock(ctx, "k")
	if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrNotObtained and the caller's DeadlineExceeded", err)
	}
}

// TestCancelledAttemptReleases: cancelling the caller's context mid-attempt
// releases what was granted, with a context that is not cancelled, and late
// grants too.
func TestCancelledAttemptReleases(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	gate := make(chan struct{})
	fakes[1].setGate(gate)
	fakes[2].setGate(gate)
	c := newTestClient(t, fakes, clk, WithNodeTimeout(time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	var err error
	go func() { defer close(done); _, err = c.TryLock(ctx, "k") }()
	for fakes[1].calls.Load() == 0 || fakes[2].calls.Load() == 0 || fakes[0].calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	waitFor(t, done, "TryLock")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("got %v, want ErrNotObtained and context.Canceled", err)
	}
	close(gate)
	c.bg.Wait()
	for i, f := range fakes {
		if v, held := f.value("redlock:{k}"); held {
			t.Fatalf("node %d still holds %q", i, v)
		}
		f.mu.Lock()
		for _, e := range f.releaseErrs {
			if e != nil {
				t.Errorf("node %d released with a done context: %v", i, e)
			}
		}
		if len(f.releaseErrs) != 1 {
			t.Errorf("node %d: got %d releases, want 1", i, len(f.releaseErrs))
		}
		f.mu.Unlock()
	}
}

func TestCancelledContextSendsNothing(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk)
	l, err := c.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
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
		if err := f(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s: got %v, want context.Canceled", name, err)
		}
	}
	if got := fakes[0].calls.Load(); got != before {
		t.Fatalf("a cancelled context sent %d calls, want none", got-before)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatalf("Unlock after the cancelled one: %v", err)
	}
}

func TestExtend(t *testing.T) {
	setup := func(t *testing.T) (*fakeClock, []*fakeNode, *Client, *Lock) {
		clk := newFakeClock()
		fakes := newFakeNodes(3, clk)
		c := newTestClient(t, fakes, clk)
		return clk, fakes, c, lockAll(t, c, "k", WithTTL(time.Second))
	}
	t.Run("majority", func(t *testing.T) {
		clk, fakes, _, l := setup(t)
		fakes[2].setErr(errFakeDown)
		clk.Advance(500 * time.Millisecond)
		if err := l.Extend(t.Context(), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if got, want := l.Validity(), 5*time.Second-52*time.Millisecond; got != want {
			t.Fatalf("Validity: got %v, want %v", got, want)
		}
	})
	t.Run("expired keys are not re-created", func(t *testing.T) {
		clk, fakes, _, l := setup(t)
		clk.Advance(2 * time.Second)
		err := l.Extend(t.Context(), 5*time.Second)
		if !errors.Is(err, ErrLockExpired) {
			t.Fatalf("got %v, want ErrLockExpired", err)
		}
		for i, f := range fakes {
			if _, held := f.value("redlock:{k}"); held {
				t.Fatalf("node %d: Extend re-created the key", i)
			}
		}
		if l.Validity() != 0 {
			t.Fatalf("Validity: got %v, want 0", l.Validity())
		}
	})
	t.Run("taken over", func(t *testing.T) {
		clk, fakes, _, l := setup(t)
		clk.Advance(2 * time.Second)
		fakes[0].set("redlock:{k}", "other", time.Minute)
		if err := l.Extend(t.Context(), 5*time.Second); !errors.Is(err, ErrLockLost) {
			t.Fatalf("got %v, want ErrLockLost", err)
		}
		if v, _ := fakes[0].value("redlock:{k}"); v != "other" {
			t.Fatalf("the other holder's key became %q", v)
		}
	})
	t.Run("too few nodes answer", func(t *testing.T) {
		_, fakes, _, l := setup(t)
		before := l.Validity()
		fakes[0].setErr(errFakeDown)
		fakes[1].setErr(errFakeDown)
		err := l.Extend(t.Context(), 5*time.Second)
		if !errors.Is(err, ErrNotObtained) || errors.Is(err, ErrLockLost) || errors.Is(err, ErrLockExpired) {
			t.Fatalf("got %v, want ErrNotObtained only", err)
		}
		if l.Validity() != before {
			t.Fatalf("Validity: got %v, want unchanged %v", l.Validity(), before)
		}
	})
	t.Run("bad ttl", func(t *testing.T) {
		_, fakes, _, l := setup(t)
		before := fakes[0].calls.Load()
		for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 2 * time.Millisecond, MaxTTL + 1} {
			if err := l.Extend(t.Context(), ttl); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("Extend(%v): got %v, want ErrInvalidArgument", ttl, err)
			}
		}
		if fakes[0].calls.Load() != before {
			t.Fatal("a rejected Extend contacted a node")
		}
	})
}

func TestUnlock(t *testing.T) {
	t.Run("twice", func(t *testing.T) {
		clk := newFakeClock()
		c := newTestClient(t, newFakeNodes(3, clk), clk)
		l, err := c.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(t.Context()); !errors.Is(err, ErrReleased) {
			t.Fatalf("second Unlock: got %v, want ErrReleased", err)
		}
		if err := l.Extend(t.Context(), time.Second); !errors.Is(err, ErrReleased) {
			t.Fatalf("Extend after Unlock: got %v, want ErrReleased", err)
		}
		if l.Validity() != 0 {
			t.Fatalf("Validity after Unlock: got %v, want 0", l.Validity())
		}
	})
	t.Run("expired", func(t *testing.T) {
		clk := newFakeClock()
		c := newTestClient(t, newFakeNodes(3, clk), clk)
		l := lockAll(t, c, "k", WithTTL(time.Second))
		clk.Advance(time.Second)
		if err := l.Unlock(t.Context()); !errors.Is(err, ErrLockExpired) {
			t.Fatalf("got %v, want ErrLockExpired", err)
		}
	})
	t.Run("taken over", func(t *testing.T) {
		clk := newFakeClock()
		fakes := newFakeNodes(3, clk)
		c := newTestClient(t, fakes, clk)
		l := lockAll(t, c, "k", WithTTL(time.Second))
		clk.Advance(time.Second)
		for _, f := range fakes[:2] {
			f.set("redlock:{k}", "other", time.Minute)
		}
		if err := l.Unlock(t.Context()); !errors.Is(err, ErrLockLost) {
			t.Fatalf("got %v, want ErrLockLost", err)
		}
		for _, f := range fakes[:2] {
			if v, _ := f.value("redlock:{k}"); v != "other" {
				t.Fatalf("a non-owner's Unlock changed the holder's key to %q", v)
			}
		}
	})
	t.Run("unreachable then retried", func(t *testing.T) {
		clk := newFakeClock()
		fakes := newFakeNodes(3, clk)
		c := newTestClient(t, fakes, clk)
		l := lockAll(t, c, "k")
		fakes[0].setErr(errFakeDown)
		fakes[1].setErr(errFakeDown)
		if err := l.Unlock(t.Context()); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("got %v, want ErrNotObtained", err)
		}
		fakes[0].setErr(nil)
		fakes[1].setErr(nil)
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatalf("retried Unlock: %v", err)
		}
	})
	t.Run("after cooldown", func(t *testing.T) {
		clk := newFakeClock()
		fakes := newFakeNodes(3, clk)
		c := newTestClient(t, fakes, clk)
		l := lockAll(t, c, "k")
		if err := l.UnlockAfter(t.Context(), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		clk.Advance(29 * time.Second)
		if _, err := c.TryLock(t.Context(), "k"); !errors.Is(err, ErrNotObtained) {
			t.Fatalf("during cooldown: got %v, want ErrNotObtained", err)
		}
		clk.Advance(time.Second)
		if _, err := c.TryLock(t.Context(), "k"); err != nil {
			t.Fatalf("after cooldown: %v", err)
		}
		for _, d := range []time.Duration{-1, time.Microsecond, MaxTTL + 1} {
			if err := l.UnlockAfter(t.Context(), d); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("UnlockAfter(%v): got %v, want ErrInvalidArgument", d, err)
			}
		}
	})
}

func TestReentry(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk)
	l := lockAll(t, c, "k", WithTTL(time.Second), WithMetadata("first"))
	if _, err := c.TryLock(t.Context(), "k"); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("another token: got %v, want ErrNotObtained", err)
	}
	clk.Advance(900 * time.Millisecond)
	again := lockAll(t, c, "k", WithToken(l.Token()), WithTTL(time.Second), WithMetadata("second"))
	if again.Token() != l.Token() || again.Validity() <= l.Validity() {
		t.Fatalf("re-entry: token %q validity %v, want %q and more than %v", again.Token(), again.Validity(), l.Token(), l.Validity())
	}
	clk.Advance(500 * time.Millisecond) // past the first TTL: the refresh kept the keys
	s, _ := c.Inspect(t.Context(), "k")
	if tok, meta, ok := s.Holder(); !ok || tok != l.Token() || meta != "second" {
		t.Fatalf("Holder: got %q %q %v", tok, meta, ok)
	}
	// A failed re-entry leaves the holder's keys in place.
	fakes[1].setErr(errFakeDown)
	fakes[2].setErr(errFakeDown)
	if _, err := c.TryLock(t.Context(), "k", WithToken(l.Token())); !errors.Is(err, ErrNotObtained) {
		t.Fatalf("got %v, want ErrNotObtained", err)
	}
	c.bg.Wait()
	if v, _ := fakes[0].value("redlock:{k}"); !owns(v, l.Token()) {
		t.Fatalf("failed re-entry removed the holder's key (now %q)", v)
	}
}

func TestInspect(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(5, clk)
	c := newTestClient(t, fakes, clk)
	s, err := c.Inspect(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := s.Holder(); ok || s.Remaining() != 0 {
		t.Fatalf("empty key: got holder %v remaining %v", ok, s.Remaining())
	}
	l := lockAll(t, c, "k", WithTTL(10*time.Second), WithMetadata("host=a pid=1"))
	fakes[0].set("redlock:{k}", l.Token(), time.Second)
	fakes[1].set("redlock:{k}", l.Token(), 2*time.Second)
	fakes[3].set("redlock:{k}", "other", -1)
	fakes[4].setErr(errFakeDown)
	s, _ = c.Inspect(t.Context(), "k")
	tok, meta, ok := s.Holder()
	if !ok || tok != l.Token() || meta != "host=a pid=1" {
		t.Fatalf("Holder: got %q %q %v", tok, meta, ok)
	}
	if got := s.Remaining(); got != time.Second {
		t.Fatalf("Remaining: got %v, want 1s (the third-longest of 1s, 2s, 10s)", got)
	}
	if n := s.Nodes[3]; !n.Held || n.Token != "other" || n.TTL != -1 {
		t.Fatalf("node 3: got %+v", n)
	}
	if n := s.Nodes[4]; n.Err == nil || n.Held {
		t.Fatalf("node 4: got %+v, want its error", n)
	}
	if _, err := c.Inspect(t.Context(), ""); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("empty key: got %v", err)
	}
}

func TestLockRetries(t *testing.T) {
	t.Run("until the holder's key expires", func(t *testing.T) {
		clk := newFakeClock()
		fakes := newFakeNodes(3, clk)
		for _, f := range fakes {
			f.set("redlock:{k}", "other", 100*time.Millisecond)
		}
		c := newTestClient(t, fakes, clk)
		var delays []int
		retry := RetryFunc(func(failed int) (time.Duration, bool) {
			delays = append(delays, failed)
			clk.Advance(40 * time.Millisecond)
			return 0, true
		})
		if _, err := c.Lock(t.Context(), "k", WithRetry(retry)); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(delays) != "[1 2 3]" {
			t.Fatalf("Delay calls: got %v, want [1 2 3]", delays)
		}
	})
	t.Run("limited", func(t *testing.T) {
		clk := newFakeClock()
		fakes := newFakeNodes(3, clk)
		for _, f := range fakes {
			f.set("redlock:{k}", "other", -1)
		}
		c := newTestClient(t, fakes, clk)
		_, err := c.Lock(t.Context(), "k", WithRetry(LimitRetry(ConstantBackoff(time.Millisecond), 2)))
		if !errors.Is(err, ErrNotObtained) || errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrNotObtained alone", err)
		}
		c.bg.Wait() // fail-fast may return before every node was called
		if got := fakes[0].calls.Load(); got != 3 {
			t.Fatalf("attempts: got %d, want 3", got)
		}
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		clk := newFakeClock()
		fakes := newFakeNodes(3, clk)
		for _, f := range fakes {
			f.set("redlock:{k}", "other", -1)
		}
		c := newTestClient(t, fakes, clk)
		ctx, cancel := context.WithCancel(t.Context())
		retry := RetryFunc(func(int) (time.Duration, bool) { cancel(); return time.Hour, true })
		_, err := c.Lock(ctx, "k", WithRetry(retry))
		if !errors.Is(err, ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want ErrNotObtained and context.Canceled", err)
		}
		var qe *QuorumError
		if !errors.As(err, &qe) || len(qe.Nodes) != 3 {
			t.Fatalf("got %v, want the last attempt's node errors", err)
		}
	})
}

func TestRetryStrategies(t *testing.T) {
	ms := time.Millisecond
	check := func(name string, s RetryStrategy, failed int, lo, hi time.Duration, ok bool) {
		t.Helper()
		for range 200 {
			d, gotOK := s.Delay(failed)
			if gotOK != ok || d < lo || d > hi {
				t.Fatalf("%s.Delay(%d): got %v %v, want %v in [%v, %v]", name, failed, d, gotOK, ok, lo, hi)
			}
		}
	}
	check("NoRetry", NoRetry(), 1, 0, 0, false)
	check("ConstantBackoff", ConstantBackoff(5*ms), 7, 5*ms, 5*ms, true)
	for failed, want := range map[int]time.Duration{0: 10 * ms, 1: 10 * ms, 2: 20 * ms, 3: 30 * ms, 4: 35 * ms, 1 << 40: 35 * ms} {
		check("LinearBackoff", LinearBackoff(10*ms, 35*ms), failed, want, want, true)
	}
	for failed, hi := range map[int]time.Duration{0: 10 * ms, 1: 10 * ms, 2: 20 * ms, 4: 80 * ms, 8: time.Second, 63: time.Second, 64: time.Second, 1 << 40: time.Second} {
		check("ExponentialBackoff", ExponentialBackoff(10*ms, time.Second), failed, 0, hi-1, true)
	}
	check("RandomBackoff", RandomBackoff(10*ms, 20*ms), 3, 10*ms, 20*ms-1, true)
	check("RandomBackoff empty", RandomBackoff(10*ms, 10*ms), 3, 10*ms, 10*ms, true)
	check("default", defaultRetry, 1, 10*ms, 200*ms-1, true)
	limited := LimitRetry(ConstantBackoff(ms), 2)
	check("LimitRetry", limited, 2, ms, ms, true)
	check("LimitRetry", limited, 3, 0, 0, false)
	check("LimitRetry(0)", LimitRetry(ConstantBackoff(ms), 0), 1, 0, 0, false)
}

func TestOptionValidation(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk)
	for _, tc := range []struct {
		name string
		key  string
		opts []LockOption
	}{
		{"empty key", "", nil},
		{"key too long", strings.Repeat("k", MaxKeyLen+1), nil},
		{"zero TTL", "k", []LockOption{WithTTL(0)}},
		{"negative TTL", "k", []LockOption{WithTTL(-time.Second)}},
		{"TTL under 1ms", "k", []LockOption{WithTTL(time.Microsecond)}},
		{"TTL leaves no validity", "k", []LockOption{WithTTL(2 * time.Millisecond)}},
		{"TTL over the cap", "k", []LockOption{WithTTL(MaxTTL + time.Second)}},
		{"nil retry", "k", []LockOption{WithRetry(nil)}},
		{"metadata too long", "k", []LockOption{WithMetadata(strings.Repeat("m", MaxMetadataLen+1))}},
		{"empty token", "k", []LockOption{WithToken("")}},
		{"token with NUL", "k", []LockOption{WithToken("a\x00b")}},
		{"token too long", "k", []LockOption{WithToken(strings.Repeat("t", MaxTokenLen+1))}},
		{"nil option", "k", []LockOption{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, f := range map[string]func() error{
				"Lock":    func() error { _, err := c.Lock(t.Context(), tc.key, tc.opts...); return err },
				"TryLock": func() error { _, err := c.TryLock(t.Context(), tc.key, tc.opts...); return err },
			} {
				if err := f(); !errors.Is(err, ErrInvalidArgument) {
					t.Errorf("%s: got %v, want ErrInvalidArgument", name, err)
				}
			}
		})
	}
	if n := fakes[0].calls.Load(); n != 0 {
		t.Fatalf("rejected calls contacted the nodes %d times", n)
	}
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"drift negative", []Option{WithDriftFactor(-0.1)}},
		{"drift one", []Option{WithDriftFactor(1)}},
		{"drift NaN", []Option{WithDriftFactor(math.NaN())}},
		{"node timeout zero", []Option{WithNodeTimeout(0)}},
		{"prefix with brace", []Option{WithKeyPrefix("a{")}},
		{"TTL too short for drift", []Option{WithDriftFactor(0.5), WithTTL(4 * time.Millisecond)}},
		{"nil option", []Option{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []node{fakes[0], fakes[1], fakes[2]}
			if _, err := newClient(nodes, tc.opts); !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	clients := make([]redis.UniversalClient, 5)
	for i := range clients {
		cl := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", 1+i)})
		t.Cleanup(func() { cl.Close() })
		clients[i] = cl
	}
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.clients, tc.opts...)
			if (err == nil) != tc.ok {
				t.Fatalf("got %v, want success %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("got %v, want ErrInvalidArgument", err)
			}
			if err == nil && fmt.Sprint(c.Nodes()[0]) != "127.0.0.1:1" {
				t.Fatalf("Nodes: got %v", c.Nodes())
			}
		})
	}
}

// TestMutualExclusionFakes: many goroutines contending through the full
// client never overlap in the critical section (run with -race).
func TestMutualExclusionFakes(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(5, clk)
	c := newTestClient(t, fakes, clk)
	var inside, overlaps, acquired atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 50 {
				l, err := c.TryLock(t.Context(), "k")
				if err != nil {
					continue
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
	if overlaps.Load() != 0 || acquired.Load() == 0 {
		t.Fatalf("got %d overlaps in %d acquisitions, want 0 in > 0", overlaps.Load(), acquired.Load())
	}
}

func TestQuorumErrorMessage(t *testing.T) {
	clk := newFakeClock()
	fakes := newFakeNodes(1, clk)
	fakes[0].set("redlock:{job}", "other", time.Minute)
	c := newTestClient(t, fakes, clk)
	_, err := c.TryLock(t.Context(), "job")
	want := `redlock: lock "job": not obtained: 0 of 1 nodes agreed, 1 needed; fake0: redlock: lock held by another token`
	if err == nil || err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.TryLock(ctx, "job")
	want = `redlock: lock "job": not obtained: no node asked: context canceled`
	if err == nil || err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
}

// BenchmarkLockUnlock measures the library's own cost per Lock+Unlock cycle
// over in-memory nodes; round trips to real Redis are benchmarked in
// integration/.
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
		{"nodes=5/observer", 5, []Option{WithObserver(ObserverFunc(func(Event) {}))}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			clk := newFakeClock()
			c := newTestClient(b, newFakeNodes(tc.n, clk), clk, tc.opts...)
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

// TestWorkersReused: node calls run on goroutines kept for reuse, and those
// exit once the Client is closed.
func TestWorkersReused(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	done := make(chan struct{})
	w := newWorkers(done)
	for range 100 {
		ran := make(chan struct{})
		w.run(func() { close(ran) })
		<-ran
		time.Sleep(time.Millisecond) // the worker goes back to waiting
	}
	if n := w.started.Load(); n > 5 {
		t.Fatalf("100 calls one after the other started %d goroutines, want them reused", n)
	}
	close(done)
	goleak.VerifyNone(t, opt)
	ran := make(chan struct{})
	w.run(func() { close(ran) }) // after close: still runs, on a goroutine that then exits
	<-ran
	goleak.VerifyNone(t, opt)
}
