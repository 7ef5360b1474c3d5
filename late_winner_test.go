package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

// lateWinnerBroken: a woken waiter's attempt has 2 grants of 5 when
// its context ends, and the other 3 come after: its grants made a
// majority after all, and their take-backs wake the next waiter at the
// instant the last of them lands (simulator seed 44483). Before, only an
// attempt that had won by the time it failed woke anyone, and the next
// waiter slept until its next look with the key free on every node. The
// late node also runs the waiter's leave, after its acquire, as a
// node's stream would. It returns what went wrong ("" for nothing).
func lateWinnerBroken(t *testing.T) string {
	var broken string
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		holder, first, next := newTestClient(t, fakes), newTestClient(t, fakes), newTestClient(t, fakes)
		block := make(chan struct{})
		acquired := []chan struct{}{make(chan struct{}), make(chan struct{}), make(chan struct{})}
		firstOp := func(o *wire.Op) bool {
			return o.Place != nil && strings.HasPrefix(o.Place.ID, first.hand.id+".")
		}
		for i, f := range fakes[2:] { // late: nodes 2, 3 and 4
			f.hold = func(o *wire.Op) {
				switch {
				case wire.IsAcquire(o.Kind) && firstOp(o):
					<-block
				case o.Kind == wire.OpQueue && o.Quiet && firstOp(o):
					<-acquired[i] // its leave comes after its acquire
				}
			}
			f.ran = func(o *wire.Op) {
				if wire.IsAcquire(o.Kind) && firstOp(o) {
					close(acquired[i])
				}
			}
		}
		ctx := t.Context()
		h, err := holder.TryLock(ctx, "k")
		require.NoError(t, err)
		failed := make(chan struct{})
		go func() {
			defer close(failed)
			wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			// A token of its own: a release does not grant it the key
			// (see grantable): the release wakes it to attempt.
			_, err := first.Lock(wctx, "k", waitHour, WithToken("first-token"))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("first waiter: got %v, want its deadline", err)
			}
		}()
		synctest.Wait()
		time.Sleep(time.Millisecond)
		got := make(chan *Lock, 1)
		nctx, ncancel := context.WithCancel(ctx) // ended where it is never woken
		defer ncancel()
		go func() {
			l, err := next.Lock(nctx, "k", waitHour)
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("next waiter: %v", err)
			}
			got <- l
		}()
		synctest.Wait()
		require.NoError(t, h.Unlock(ctx)) // wakes the first waiter, granted on nodes 0 and 1 only
		<-failed
		synctest.Wait()
		if len(got) != 0 {
			close(block)
			broken = "the next waiter was served before the first waiter's late grants"
			return
		}

		at := time.Now()
		close(block) // the late grants land, and are taken back
		synctest.Wait()
		select {
		case l := <-got:
			defer func() { _ = l.Unlock(ctx) }()
			switch {
			case time.Since(at) != 0:
				broken = "the next waiter was not woken by the take-backs"
			case strings.Contains(l.Token(), ".wi"): // woken to attempt: a take-back grants nothing (Op.WakeOnly)
				broken = "a take-back granted the key"
			}
		default:
			broken = "the next waiter was not woken: the first waiter's grants made a majority, and were given back"
		}
	})
	return broken
}

func TestLateWinnerWakesNext(t *testing.T) {
	if b := lateWinnerBroken(t); b != "" {
		t.Fatal(b)
	}
}
