package redlock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Observe(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) snapshot() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []EventKind
	for _, e := range r.events {
		ks = append(ks, e.Kind)
	}
	return ks
}

func (r *recorder) count(k EventKind) int {
	n := 0
	for _, x := range r.kinds() {
		if x == k {
			n++
		}
	}
	return n
}

func TestAutoExtendKeepsTheLock(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	rec := &recorder{}
	c := newTestClient(t, fakes, clk, WithObserver(rec))
	const ttl = 100 * time.Millisecond
	l, err := c.TryLock(t.Context(), "k", WithTTL(ttl), WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(5 * ttl); time.Now().Before(end); time.Sleep(ttl / 10) {
		if l.Validity() <= 0 || l.Err() != nil {
			t.Fatalf("lost while healthy: validity %v, err %v", l.Validity(), l.Err())
		}
	}
	if n := rec.count(EventExtended); n < 10 {
		t.Fatalf("got %d extensions in 5×TTL, want about 15 (every TTL/3)", n)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.ext.done:
	default:
		t.Fatal("the extender goroutine is still running after Unlock returned")
	}
	// No extension can happen after Unlock.
	before := fakes[0].extends.Load()
	time.Sleep(ttl)
	if after := fakes[0].extends.Load(); after != before {
		t.Fatalf("%d extensions after Unlock", after-before)
	}
	select {
	case <-l.Lost():
	default:
		t.Fatal("Lost not closed after Unlock")
	}
	if !errors.Is(l.Err(), ErrReleased) {
		t.Fatalf("Err after Unlock: got %v, want ErrReleased", l.Err())
	}
}

// TestAutoExtendLosesBeforeValidityEnds: when extensions fail, the lock is
// declared lost with TTL/10 of validity left, not after.
func TestAutoExtendLosesBeforeValidityEnds(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	rec := &recorder{}
	c := newTestClient(t, fakes, clk, WithObserver(rec))
	const ttl = 300 * time.Millisecond
	l, err := c.TryLock(t.Context(), "k", WithTTL(ttl), WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	c.bg.Wait()
	fakes[1].setErr(errFakeDown)
	fakes[2].setErr(errFakeDown)
	until := l.Until() // no extension succeeds from now on
	<-l.Lost()
	lostAt := time.Now()
	if !errors.Is(l.Err(), ErrLockExpired) {
		t.Fatalf("Err: got %v, want ErrLockExpired", l.Err())
	}
	margin := ttl / LostMarginDivisor
	if left := until.Sub(lostAt); left < margin/2 {
		t.Fatalf("lost with %v of validity left, want about %v", left, margin)
	}
	if rec.count(EventExtendFailed) == 0 || rec.count(EventLost) != 1 {
		t.Fatalf("events %v: want extension failures reported and one loss", rec.kinds())
	}
	if !strings.Contains(l.Err().Error(), "failed extensions") {
		t.Fatalf("Err %q does not say the extensions failed", l.Err())
	}
}

func TestAutoExtendTakenOver(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk)
	l, err := c.TryLock(t.Context(), "k", WithTTL(300*time.Millisecond), WithAutoExtend(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c.bg.Wait()
	for _, f := range fakes[:2] {
		f.set("redlock:{k}", "other", time.Minute)
	}
	<-l.Lost()
	if !errors.Is(l.Err(), ErrLockLost) {
		t.Fatalf("Err: got %v, want ErrLockLost", l.Err())
	}
	if l.Validity() != 0 {
		t.Fatalf("Validity after loss: %v", l.Validity())
	}
}

func TestMaxHold(t *testing.T) {
	clk := newRealClock()
	c := newTestClient(t, newFakeNodes(3, clk), clk)
	start := time.Now()
	err := c.Do(t.Context(), "k", func(ctx context.Context) error {
		<-ctx.Done()
		return context.Cause(ctx)
	}, WithTTL(100*time.Millisecond), WithMaxHold(250*time.Millisecond))
	took := time.Since(start)
	if !errors.Is(err, ErrLockExpired) || !strings.Contains(err.Error(), "WithMaxHold") {
		t.Fatalf("got %v, want the hold limit as the cause", err)
	}
	if took < 150*time.Millisecond || took > 250*time.Millisecond {
		t.Fatalf("work cancelled after %v, want before the 250ms cap, after its last extension", took)
	}
}

func TestLostWithoutAutoExtend(t *testing.T) {
	clk := newRealClock()
	c := newTestClient(t, newFakeNodes(3, clk), clk)
	l, err := c.TryLock(t.Context(), "k", WithTTL(60*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	lost := l.Lost()
	if err := l.Extend(t.Context(), 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
		t.Fatal("Lost closed while the extended lock was valid")
	case <-time.After(100 * time.Millisecond):
	}
	<-lost
	if !errors.Is(l.Err(), ErrLockExpired) || l.Validity() != 0 {
		t.Fatalf("got err %v validity %v, want expired", l.Err(), l.Validity())
	}
}

func TestDo(t *testing.T) {
	t.Run("runs, extends and releases", func(t *testing.T) {
		clk := newRealClock()
		fakes := newFakeNodes(3, clk)
		c := newTestClient(t, fakes, clk)
		wantErr := errors.New("work failed")
		err := c.Do(t.Context(), "k", func(ctx context.Context) error {
			time.Sleep(200 * time.Millisecond) // 4×TTL
			if ctx.Err() != nil {
				t.Errorf("work cancelled while the lock was healthy: %v", context.Cause(ctx))
			}
			return wantErr
		}, WithTTL(50*time.Millisecond))
		if !errors.Is(err, wantErr) || errors.Is(err, ErrLockExpired) {
			t.Fatalf("got %v, want the work's error alone", err)
		}
		c.bg.Wait()
		for i, f := range fakes {
			if _, held := f.value("redlock:{k}"); held {
				t.Fatalf("node %d still holds the key after Do", i)
			}
		}
	})
	t.Run("lost", func(t *testing.T) {
		clk := newRealClock()
		fakes := newFakeNodes(3, clk)
		c := newTestClient(t, fakes, clk)
		err := c.Do(t.Context(), "k", func(ctx context.Context) error {
			for _, f := range fakes[:2] {
				f.set("redlock:{k}", "other", time.Minute)
			}
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), ErrLockLost) {
				t.Errorf("cause: got %v, want ErrLockLost", context.Cause(ctx))
			}
			return nil
		}, WithTTL(100*time.Millisecond), WithAutoExtend(10*time.Millisecond))
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("got %v, want ErrLockLost", err)
		}
	})
	t.Run("panic releases", func(t *testing.T) {
		clk := newRealClock()
		fakes := newFakeNodes(3, clk)
		c := newTestClient(t, fakes, clk)
		func() {
			defer func() { _ = recover() }()
			_ = c.Do(t.Context(), "k", func(context.Context) error { panic("boom") })
		}()
		c.bg.Wait()
		if _, held := fakes[0].value("redlock:{k}"); held {
			t.Fatal("a panicking Do left the lock held")
		}
	})
	t.Run("not obtained", func(t *testing.T) {
		clk := newRealClock()
		fakes := newFakeNodes(3, clk)
		for _, f := range fakes {
			f.set("redlock:{k}", "other", -1)
		}
		c := newTestClient(t, fakes, clk)
		ran := false
		err := c.Do(t.Context(), "k", func(context.Context) error { ran = true; return nil }, WithRetry(NoRetry()))
		if ran || !errors.Is(err, ErrNotObtained) {
			t.Fatalf("ran %v, err %v: want no run and ErrNotObtained", ran, err)
		}
		if err := c.Do(t.Context(), "k", nil); !errors.Is(err, ErrInvalidArgument) {
			t.Fatalf("nil fn: got %v", err)
		}
	})
}

func TestClose(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	nodes := []node{fakes[0], fakes[1], fakes[2]}
	c, err := newClient(nodes, []Option{withClock(clk)})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.TryLock(t.Context(), "a")
	if err != nil {
		t.Fatal(err)
	}
	auto, err := c.TryLock(t.Context(), "b", WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error)
	go func() {
		_, err := c.Lock(context.Background(), "a", WithRetry(ConstantBackoff(time.Hour)))
		waiting <- err
	}()
	for !c.hand.busy(c.redisKey("a")) {
		time.Sleep(time.Millisecond)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; !errors.Is(err, ErrClosed) || !errors.Is(err, ErrNotObtained) {
		t.Fatalf("waiting Lock: got %v, want ErrClosed", err)
	}
	for i, f := range fakes {
		for _, k := range []string{"redlock:{a}", "redlock:{b}"} {
			if _, held := f.value(k); held {
				t.Fatalf("node %d still holds %s after Close", i, k)
			}
		}
	}
	for _, l := range []*Lock{plain, auto} {
		if !errors.Is(l.Err(), ErrReleased) {
			t.Fatalf("lock %s after Close: %v", l.Key(), l.Err())
		}
	}
	for name, f := range map[string]func() error{
		"Lock":    func() error { _, err := c.Lock(t.Context(), "x"); return err },
		"TryLock": func() error { _, err := c.TryLock(t.Context(), "x"); return err },
		"Do":      func() error { return c.Do(t.Context(), "x", func(context.Context) error { return nil }) },
		"Inspect": func() error { _, err := c.Inspect(t.Context(), "x"); return err },
	} {
		if err := f(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// expectHandoff takes the lock with holder, starts a Lock in waiter whose
// retry timer is an hour, unlocks, and fails unless the waiter gets the
// lock: only a hand-off can wake it in time.
func expectHandoff(t *testing.T, holder, waiter *Client, how string) {
	t.Helper()
	l, err := holder.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error)
	go func() {
		l, err := waiter.Lock(t.Context(), "k", WithRetry(ConstantBackoff(time.Hour)))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		got <- err
	}()
	for !waiter.hand.busy(waiter.redisKey("k")) {
		time.Sleep(time.Millisecond)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the waiter was not woken by %s", how)
	}
}

// TestHandoffLocal: a waiter of the same Client gets the lock at the
// holder's Unlock, even with no release notices from the nodes.
func TestHandoffLocal(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	for _, f := range fakes {
		f.noNotices = true
	}
	c := newTestClient(t, fakes, clk)
	expectHandoff(t, c, c, "the Unlock")
}

// TestHandoffNotice: a waiter in another Client is woken by the release
// notice the nodes publish.
func TestHandoffNotice(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	expectHandoff(t, newTestClient(t, fakes, clk), newTestClient(t, fakes, clk), "the release notice")
}

// TestHandoffOrder: waiters of one Client get the lock in arrival order, and
// a newcomer queues behind them.
func TestHandoffOrder(t *testing.T) {
	clk := newRealClock()
	c := newTestClient(t, newFakeNodes(3, clk), clk)
	holder, err := c.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			l, err := c.Lock(t.Context(), "k", WithRetry(ConstantBackoff(time.Hour)))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			if err := l.Unlock(t.Context()); err != nil {
				t.Error(err)
			}
		})
		for { // wait until waiter i is queued
			c.hand.mu.Lock()
			q := c.hand.queues[c.redisKey("k")]
			n := 0
			if q != nil {
				n = len(q.waiters)
			}
			c.hand.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != 4 || order[0] != 0 || order[1] != 1 || order[2] != 2 || order[3] != 3 {
		t.Fatalf("got order %v, want [0 1 2 3]", order)
	}
}

// TestNoBarging: a holder that unlocks and at once locks again queues behind
// the goroutine already waiting, instead of taking the lock back.
func TestNoBarging(t *testing.T) {
	clk := newRealClock()
	c := newTestClient(t, newFakeNodes(3, clk), clk)
	wait := WithRetry(ConstantBackoff(time.Hour))
	a, err := c.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		bGot := make(chan *Lock)
		go func() {
			l, err := c.Lock(t.Context(), "k", wait)
			if err != nil {
				t.Error(err)
			}
			bGot <- l
		}()
		for !c.hand.busy(c.redisKey("k")) {
			time.Sleep(100 * time.Microsecond)
		}
		if err := a.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		aGot := make(chan *Lock)
		go func() {
			l, err := c.Lock(t.Context(), "k", wait) // straight back in
			if err != nil {
				t.Error(err)
			}
			aGot <- l
		}()
		var b *Lock
		select {
		case b = <-bGot:
		case <-aGot:
			t.Fatalf("round %d: the unlocking goroutine took the lock back ahead of the waiter", i)
		}
		time.Sleep(time.Millisecond)
		if err := b.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		a = <-aGot
	}
	if err := a.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestRetryAfter(t *testing.T) {
	clk := newFakeClock()
	c := newTestClient(t, newFakeNodes(5, clk), clk)
	held := func(token string, pttl time.Duration) result {
		return result{status: statusHeld, value: token, pttl: pttl}
	}
	ok, down := result{status: statusOK}, result{err: errFakeDown}
	const rt = time.Millisecond
	for _, tc := range []struct {
		name    string
		results []result
		lo, hi  time.Duration // want a value in [lo, hi]; 0, 0: no bound
	}{
		{"holder with a majority", []result{held("A", 10*time.Millisecond), held("A", 30*time.Millisecond), held("A", 20*time.Millisecond), ok, ok}, 31 * time.Millisecond, 31 * time.Millisecond},
		{"holder without TTL", []result{held("A", 10*time.Millisecond), held("A", -1), held("A", 20*time.Millisecond), ok, down}, 0, 0},
		{"split vote", []result{held("A", time.Minute), held("A", time.Minute), held("B", time.Minute), held("B", time.Minute), ok}, time.Microsecond, 2*rt + time.Microsecond},
		{"majority down", []result{held("A", time.Minute), ok, down, down, down}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := c.retryAfter(&round{results: tc.results}, rt)
			if got < tc.lo || got > tc.hi {
				t.Fatalf("got %v, want in [%v, %v]", got, tc.lo, tc.hi)
			}
		})
	}
}

// TestWaitBoundedByHolderTTL: a holder that never releases is outlived by
// its TTL, and the waiter tries again then, not at its hour-long timer.
func TestWaitBoundedByHolderTTL(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	for _, f := range fakes {
		f.set("redlock:{k}", "crashed-holder", 50*time.Millisecond)
	}
	c := newTestClient(t, fakes, clk)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := c.Lock(ctx, "k", WithRetry(ConstantBackoff(time.Hour))); err != nil {
		t.Fatalf("got %v, want the lock once the holder's TTL ran out", err)
	}
}

func TestObserverEvents(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	rec := &recorder{}
	c := newTestClient(t, fakes, clk, WithObserver(rec))
	type ctxKey struct{}
	ctx := context.WithValue(t.Context(), ctxKey{}, "caller")
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	fakes[0].set("redlock:{k}", "other", time.Minute)
	fakes[1].set("redlock:{k}", "other", time.Minute)
	if _, err := c.TryLock(ctx, "k"); err == nil {
		t.Fatal("want a refusal")
	}
	for _, e := range rec.snapshot() {
		if e.Context == nil || e.Context.Value(ctxKey{}) != "caller" {
			t.Fatalf("%v event does not carry the caller's context", e.Kind)
		}
	}
	got := rec.kinds()
	want := []EventKind{EventAcquired, EventExtended, EventReleased, EventRefused}
	if len(got) != len(want) {
		t.Fatalf("got events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got events %v, want %v", got, want)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	acq := rec.events[0]
	if acq.Key != "k" || acq.Attempt != 1 || acq.Validity <= 0 || len(acq.Nodes) != 3 {
		t.Fatalf("acquired event: %+v", acq)
	}
	answered := 0
	for _, n := range acq.Nodes {
		if n.Outcome == OutcomeOK && n.Latency > 0 {
			answered++
		}
	}
	if answered < 2 {
		t.Fatalf("acquired event nodes: %+v, want a majority OK with latencies", acq.Nodes)
	}
	ref := rec.events[3]
	if !errors.Is(ref.Err, ErrNotObtained) || ref.Nodes[0].Outcome != OutcomeHeld && ref.Nodes[1].Outcome != OutcomeHeld {
		t.Fatalf("refused event: %+v", ref)
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk, WithLogger(logger))
	l, err := c.TryLock(t.Context(), "job", WithTTL(100*time.Millisecond), WithAutoExtend(0))
	if err != nil {
		t.Fatal(err)
	}
	c.bg.Wait()
	fakes[1].setErr(errFakeDown)
	fakes[2].setErr(errFakeDown)
	<-l.Lost()
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{`level=DEBUG msg="redlock acquired" key=job`, `level=WARN msg="redlock extend-failed"`, `level=ERROR msg="redlock lost"`, `fake1.outcome=failed`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, l.Token()) {
		t.Error("the log contains the lock's token")
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestLostRace: Lost, Err, Unlock and a loss racing never double-close or
// deadlock (run with -race).
func TestLostRace(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk)
	for range 100 {
		l, err := c.TryLock(t.Context(), "k", WithTTL(20*time.Millisecond), WithAutoExtend(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { <-l.Lost() })
		wg.Go(func() { l.lose(errors.New("test loss")) })
		wg.Go(func() { _ = l.Err() })
		wg.Go(func() { _ = l.Unlock(t.Context()) })
		wg.Wait()
		if l.Err() == nil {
			t.Fatal("Err is nil after the lock ended")
		}
		c.bg.Wait()
		for _, f := range fakes {
			f.mu.Lock()
			delete(f.keys, "redlock:{k}")
			f.mu.Unlock()
		}
	}
}

// TestLostBetweenClaimAndClose: Lost called after a loss is claimed but
// before it is announced gets a closed channel, and the announcement does
// not close it a second time.
func TestLostBetweenClaimAndClose(t *testing.T) {
	clk := newRealClock()
	c := newTestClient(t, newFakeNodes(3, clk), clk)
	l, err := c.TryLock(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	l.claimEnd(errors.New("lost"))
	ch := l.Lost()
	l.closeLost() // would panic on a double close
	select {
	case <-ch:
	default:
		t.Fatal("Lost is open after the lock ended")
	}
}

// TestNoExtensionAfterUnlock: Unlock racing the extender many times; once
// Unlock has returned, no extension reaches a node.
func TestNoExtensionAfterUnlock(t *testing.T) {
	clk := newRealClock()
	fakes := newFakeNodes(3, clk)
	c := newTestClient(t, fakes, clk)
	var late atomic.Int32
	for range 50 {
		l, err := c.TryLock(t.Context(), "k", WithTTL(30*time.Millisecond), WithAutoExtend(time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Millisecond)
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.bg.Wait()
		before := fakes[0].extends.Load()
		time.Sleep(3 * time.Millisecond)
		late.Add(fakes[0].extends.Load() - before)
	}
	if late.Load() != 0 {
		t.Fatalf("%d extensions after Unlock returned", late.Load())
	}
}
