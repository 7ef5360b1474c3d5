package redlock

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is an Observer that keeps every event.
type recorder struct{ events syncList[Event] }

func (r *recorder) Observe(e Event) { r.events.add(e) }

func (r *recorder) snapshot() []Event { return r.events.get() }

// syncList is a list that goroutines append to.
type syncList[T any] struct {
	mu    sync.Mutex
	items []T
}

func (l *syncList[T]) add(x T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items = append(l.items, x)
}

func (l *syncList[T]) get() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.items)
}

func (r *recorder) kinds() []EventKind {
	var ks []EventKind
	for _, e := range r.snapshot() {
		ks = append(ks, e.Kind)
	}
	return ks
}

// count returns how many events of kind k succeeded (or, for EventEnd,
// happened).
func (r *recorder) count(k EventKind) int {
	n := 0
	for _, e := range r.snapshot() {
		if e.Kind == k && (e.Err == nil || k == EventEnd) {
			n++
		}
	}
	return n
}

// countFailed returns how many rounds of kind k failed.
func (r *recorder) countFailed(k EventKind) int {
	n := 0
	for _, e := range r.snapshot() {
		if e.Kind == k && e.Err != nil {
			n++
		}
	}
	return n
}

func TestObserverEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		for i, f := range fakes {
			f.delay = time.Duration(i+1) * time.Millisecond
		}
		rec := &recorder{}
		c := newTestClient(t, fakes, WithObserver(rec.Observe))
		type ctxKey struct{}
		ctx := context.WithValue(t.Context(), ctxKey{}, "caller")
		l, err := c.TryLock(ctx, "k")
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Second))
		require.NoError(t, l.Unlock(ctx))
		fakes[0].set("redlock:{k}", "other", time.Minute)
		fakes[1].set("redlock:{k}", "other", time.Minute)
		_, err = c.TryLock(ctx, "k")
		require.Error(t, err, "want a refusal")
		for _, e := range rec.snapshot() {
			require.NotNil(t, e.Context)
			require.Equal(t, "caller", e.Context.Value(ctxKey{}), "%v event does not carry the caller's context", e.Kind)
		}
		require.Equal(t, []EventKind{EventAcquire, EventExtend, EventRelease, EventAcquire}, rec.kinds())
		events := rec.snapshot()
		acq := events[0]
		require.Equal(t, "k", acq.Key)
		require.Equal(t, 1, acq.Attempt)
		require.Equal(t, 2*time.Millisecond, acq.Duration, "the majority answered after 2 ms")
		require.Equal(t, 10*time.Second-102*time.Millisecond-2*time.Millisecond, acq.Validity)
		require.NoError(t, acq.Err)
		require.Equal(t, []NodeResult{
			{Node: "fake0", Latency: time.Millisecond},
			{Node: "fake1", Latency: 2 * time.Millisecond},
			{Node: "fake2", Err: errUndecided},
		}, acq.Nodes)
		ref := events[3]
		require.ErrorIs(t, ref.Err, ErrNotObtained)
		assert.ErrorIs(t, ref.Nodes[0].Err, ErrHeld)
		assert.ErrorIs(t, ref.Nodes[1].Err, ErrHeld)
	})
}

func TestLogger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes, WithLogger(logger))
		l, err := c.TryLock(t.Context(), "job", WithTTL(100*time.Millisecond), WithAutoExtend(0))
		require.NoError(t, err)
		c.bg.Wait()
		fakes[1].setErr(errFakeDown)
		fakes[2].setErr(errFakeDown)
		<-l.Done()
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		for _, want := range []string{`level=DEBUG msg="redlock acquire" key=job`, `level=WARN msg="redlock extend failed"`, `level=ERROR msg="redlock end"`, `fake1.error="fake: connection refused"`} {
			assert.Contains(t, out, want)
		}
		assert.NotContains(t, out, l.Token(), "the log contains the lock's token")
	})
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

// TestEventAttemptCountsAttempts: Event.Attempt numbers a Lock call's
// attempts only, not the looks at the wait queue a queued Lock makes
// between them; a semaphore's sweep is one attempt, at each slot.
func TestEventAttemptCountsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		var looks atomic.Int32
		fakes[0].hold = func(o *wire.Op) {
			if o.Kind == wire.OpQueue && !o.Quiet {
				looks.Add(1)
			}
		}
		holder := newTestClient(t, fakes)
		rec := &recorder{}
		waiter := newTestClient(t, fakes, WithObserver(rec.Observe))
		l, err := holder.TryLock(t.Context(), "k")
		require.NoError(t, err)
		got := make(chan error)
		go func() {
			w, err := waiter.Lock(t.Context(), "k")
			if err == nil {
				err = w.Unlock(t.Context())
			}
			got <- err
		}()
		time.Sleep(time.Second) // the waiter looks at the queue every 10–200 ms
		require.NoError(t, l.Unlock(t.Context()))
		require.NoError(t, <-got)
		require.Greater(t, looks.Load(), int32(3), "the waiter did not look at the queue between its attempts")
		var numbers []int
		for _, e := range rec.snapshot() {
			if e.Kind == EventAcquire {
				numbers = append(numbers, e.Attempt)
			}
		}
		require.Equal(t, []int{1, 2}, numbers, "the refused first attempt, then the one the release woke")

		// A semaphore's waiter: one sweep (one attempt per slot), then looks
		// at every slot's queue, and the attempt its turn brings.
		rec = &recorder{}
		s, err := newTestClient(t, fakes, WithObserver(rec.Observe)).Semaphore("s", 2)
		require.NoError(t, err)
		p, err := holder.Semaphore("s", 2)
		require.NoError(t, err)
		var permits []*Lock
		for range 2 {
			permit, err := p.TryAcquire(t.Context())
			require.NoError(t, err)
			permits = append(permits, permit)
		}
		looks.Store(0)
		go func() {
			w, err := s.Acquire(t.Context())
			if err == nil {
				err = w.Unlock(t.Context())
			}
			got <- err
		}()
		time.Sleep(time.Second)
		require.NoError(t, permits[1].Unlock(t.Context()))
		require.NoError(t, <-got)
		require.Greater(t, looks.Load(), int32(3), "the waiter did not look at the queues between its attempts")
		numbers = nil
		for _, e := range rec.snapshot() {
			if e.Kind == EventAcquire {
				numbers = append(numbers, e.Attempt)
			}
		}
		require.Equal(t, []int{1, 1, 2}, numbers, "the refused sweep (two slots), then the attempt its turn brought")
		permit := permits[0]
		require.NoError(t, permit.Unlock(t.Context()))
	})
}
