package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// pauser is an Observer that, once armed, holds the goroutine of the next
// extension in its EventExtend until the test lets it go. With that goroutine
// held, a sleep of the test's is a pause of the whole process: the clock
// jumps and nothing of the lock runs meanwhile, so what the test sees next
// is what a process resumed after SIGSTOP sees at its first look.
type pauser struct {
	armed  atomic.Bool
	held   chan struct{} // closed once an extension is held
	resume chan struct{}
	once   sync.Once
}

func newPauser(t *testing.T) *pauser {
	p := &pauser{held: make(chan struct{}), resume: make(chan struct{})}
	t.Cleanup(p.letGo)
	return p
}

// letGo lets the held goroutine go on.
func (p *pauser) letGo() { p.once.Do(func() { close(p.resume) }) }

func (p *pauser) observe(e Event) {
	if e.Kind == EventExtend && p.armed.CompareAndSwap(true, false) {
		close(p.held)
		<-p.resume
	}
}

// pause holds the lock's extension goroutine at its next extension, then
// sleeps for d.
func (p *pauser) pause(d time.Duration) {
	p.armed.Store(true)
	<-p.held
	time.Sleep(d)
}

// A look is one way for a holder to ask whether its lock has ended; it
// reports whether the lock has, as that way tells.
type look struct {
	name string
	seen func(ctx context.Context, l *Lock) bool
}

var (
	lookErr      = look{"Lock.Err", func(_ context.Context, l *Lock) bool { return l.Err() != nil }}
	lookDone     = look{"Lock.Done", func(_ context.Context, l *Lock) bool { return closed(l.Done()) }}
	lookCtxErr   = look{"ctx.Err", func(ctx context.Context, _ *Lock) bool { return ctx.Err() != nil }}
	lookCtxDone  = look{"ctx.Done", func(ctx context.Context, _ *Lock) bool { return closed(ctx.Done()) }}
	lookCtxCause = look{"context.Cause", func(ctx context.Context, _ *Lock) bool { return errors.Is(context.Cause(ctx), ErrExpired) }}
	lockLooks    = []look{lookErr, lookDone}
	workLooks    = []look{lookCtxErr, lookCtxDone, lookCtxCause}
)

// closed is a select on ch with a default case.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestResumedHolderSeesItsEnd: a holder resumed after a pause past its
// lock's end point sees the end at its first look, whichever way it looks
// and whatever it holds, before the goroutine that would have signalled
// the end has run (it is held; see pauser). Every other way of looking
// agrees at once, the work's context carries the cause, and the lock
// reports its end once.
func TestResumedHolderSeesItsEnd(t *testing.T) {
	const ttl = time.Second
	type hold func(c *Client, work func(ctx context.Context, l *Lock)) error
	holds := []struct {
		name  string
		looks []look
		hold  hold
	}{
		{"Lock with auto-extension", lockLooks, func(c *Client, work func(context.Context, *Lock)) error {
			l, err := c.Lock(context.Background(), "k", WithAutoExtend(0))
			if err != nil {
				return err
			}
			work(nil, l)
			return l.Unlock(context.Background())
		}},
		{"Do", workLooks, func(c *Client, work func(context.Context, *Lock)) error {
			return c.Do(context.Background(), "k", func(ctx context.Context) error { work(ctx, nil); return nil })
		}},
		{"Election.Lead", append(workLooks, lockLooks...), func(c *Client, work func(context.Context, *Lock)) error {
			e, err := c.Election("e")
			if err != nil {
				return err
			}
			return e.Lead(context.Background(), "v", func(ctx context.Context, ld *Leadership) error { work(ctx, ld.Lock()); return nil })
		}},
		{"MultiLock.Do", workLooks, func(c *Client, work func(context.Context, *Lock)) error {
			m, err := c.MultiLock([]string{"a", "b"})
			if err != nil {
				return err
			}
			return m.Do(context.Background(), func(ctx context.Context) error { work(ctx, nil); return nil })
		}},
		{"RWMutex.RDo", workLooks, func(c *Client, work func(context.Context, *Lock)) error {
			m, err := c.RWMutex("rw")
			if err != nil {
				return err
			}
			return m.RDo(context.Background(), func(ctx context.Context) error { work(ctx, nil); return nil })
		}},
		{"RWMutex.Do", workLooks, func(c *Client, work func(context.Context, *Lock)) error {
			m, err := c.RWMutex("rw")
			if err != nil {
				return err
			}
			return m.Do(context.Background(), func(ctx context.Context) error { work(ctx, nil); return nil })
		}},
		{"Semaphore.Do", workLooks, func(c *Client, work func(context.Context, *Lock)) error {
			s, err := c.Semaphore("s", 2)
			if err != nil {
				return err
			}
			return s.Do(context.Background(), func(ctx context.Context) error { work(ctx, nil); return nil })
		}},
	}
	for _, h := range holds {
		for _, first := range h.looks {
			t.Run(h.name+"/"+first.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					p := newPauser(t)
					rec := &recorder{}
					c := newTestClient(t, newFakeNodes(3), WithTTL(ttl), WithObserver(p.observe), WithObserver(rec.Observe))
					err := h.hold(c, func(ctx context.Context, l *Lock) {
						defer p.letGo() // before the release, which waits for it
						p.pause(2 * ttl)
						require.True(t, first.seen(ctx, l), "the first look after the pause did not see the end")
						for _, other := range h.looks {
							require.True(t, other.seen(ctx, l), "%s did not see the end after %s did", other.name, first.name)
						}
						if ctx != nil {
							require.ErrorIs(t, context.Cause(ctx), ErrExpired)
						}
						if l != nil {
							require.ErrorIs(t, l.Err(), ErrExpired)
							require.Zero(t, l.Validity())
						}
					})
					require.ErrorIs(t, err, ErrExpired)
					require.Equal(t, 1, rec.count(EventEnd), "the lock's end reported %d times", rec.count(EventEnd))
				})
			})
		}
	}
}

// TestExpiredPlainLockLooks: a lock without auto-extension has ended once
// its validity has run out: Err says so whether or not Done was ever
// called, and the first call to Done returns a closed channel.
func TestExpiredPlainLockLooks(t *testing.T) {
	for _, first := range lockLooks {
		t.Run(first.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newTestClient(t, newFakeNodes(3))
				l, err := c.TryLock(t.Context(), "k")
				require.NoError(t, err)
				time.Sleep(l.Validity() - time.Nanosecond)
				require.False(t, first.seen(nil, l), "ended while valid")
				time.Sleep(time.Nanosecond)
				require.True(t, first.seen(nil, l), "not ended once the validity ran out")
				require.ErrorIs(t, l.Err(), ErrExpired)
				require.True(t, closed(l.Done()))
			})
		})
	}
}

// BenchmarkLook: what a look costs work that polls its context (Err of
// the context Do gives it, which looks at the lock first) beside a plain
// cancellable context's Err, and Lock.Err.
func BenchmarkLook(b *testing.B) {
	c := newTestClient(b, newFakeNodes(3))
	b.Run("context=plain", func(b *testing.B) {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		b.ReportAllocs()
		for b.Loop() {
			_ = ctx.Err()
		}
	})
	b.Run("context=Do", func(b *testing.B) {
		err := c.Do(context.Background(), "k", func(ctx context.Context) error {
			b.ReportAllocs()
			for b.Loop() {
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	})
	b.Run("Lock.Err", func(b *testing.B) {
		l, err := c.TryLock(context.Background(), "k2")
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = l.Unlock(context.Background()) }()
		b.ReportAllocs()
		for b.Loop() {
			if l.Err() != nil {
				b.Fatal(l.Err())
			}
		}
	})
}
