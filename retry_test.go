package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRetryStrategies(t *testing.T) {
	ms := time.Millisecond
	check := func(name string, s RetryStrategy, failed int, lo, hi time.Duration, ok bool) {
		t.Helper()
		for range 200 {
			d, gotOK := s(failed)
			if gotOK != ok || d < lo || d > hi {
				t.Fatalf("%s(%d): got %v %v, want %v in [%v, %v]", name, failed, d, gotOK, ok, lo, hi)
			}
		}
	}
	check("NoRetry", NoRetry(), 1, 0, 0, false)
	check("RandomBackoff constant", RandomBackoff(5*ms, 5*ms), 7, 5*ms, 5*ms, true)
	for failed, want := range map[int]time.Duration{0: 10 * ms, 1: 10 * ms, 2: 20 * ms, 3: 30 * ms, 4: 35 * ms, 1 << 40: 35 * ms} {
		check("LinearBackoff", LinearBackoff(10*ms, 35*ms), failed, want, want, true)
	}
	for failed, hi := range map[int]time.Duration{0: 10 * ms, 1: 10 * ms, 2: 20 * ms, 4: 80 * ms, 8: time.Second, 63: time.Second, 64: time.Second, 1 << 40: time.Second} {
		check("ExponentialBackoff", ExponentialBackoff(10*ms, time.Second), failed, 0, hi-1, true)
	}
	check("RandomBackoff", RandomBackoff(10*ms, 20*ms), 3, 10*ms, 20*ms-1, true)
	check("RandomBackoff empty", RandomBackoff(10*ms, 10*ms), 3, 10*ms, 10*ms, true)
	check("default", defaultRetry, 1, 10*ms, 200*ms-1, true)
	limited := LimitRetry(RandomBackoff(ms, ms), 2)
	check("LimitRetry", limited, 2, ms, ms, true)
	check("LimitRetry", limited, 3, 0, 0, false)
	check("LimitRetry(0)", LimitRetry(RandomBackoff(ms, ms), 0), 1, 0, 0, false)
}

// tryTimes records when each try of Lock reached a fake node: an acquire,
// or a look at the wait queue (a refused first attempt's join, at the same
// instant in virtual time, is part of that try). Install it with watch
// before the node is used.
type tryTimes struct {
	mu       sync.Mutex
	start    []time.Time
	acquires int
}

func (a *tryTimes) watch(n *fakeNode) {
	n.hold = func(o *wire.Op) {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case o.Kind == wire.OpAcquire, o.Kind == wire.OpAcquirePlain:
			a.acquires++
		case o.Kind != wire.OpQueue || o.Quiet:
			return
		}
		if now := time.Now(); len(a.start) == 0 || !now.Equal(a.start[len(a.start)-1]) {
			a.start = append(a.start, now)
		}
	}
}

// gaps returns the time between consecutive tries.
func (a *tryTimes) gaps() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(a.start); i++ {
		g = append(g, a.start[i].Sub(a.start[i-1]))
	}
	return g
}

// TestLockWaitsAsTheStrategySays: against a holder whose keys never expire,
// Lock waits exactly the strategy's delays between tries, in virtual time
// (after the first attempt, each try is a look at the wait queue: the key
// is held), and gives up when it says so; the default strategy waits a
// random 10–200 ms until the caller's context ends.
func TestLockWaitsAsTheStrategySays(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name     string
		strategy RetryStrategy // nil: the default
		lo, hi   func(gap int) time.Duration
	}{
		{"linear", LimitRetry(LinearBackoff(10*ms, 35*ms), 5),
			func(i int) time.Duration { return min(time.Duration(i+1)*10*ms, 35*ms) },
			func(i int) time.Duration { return min(time.Duration(i+1)*10*ms, 35*ms) }},
		{"exponential", LimitRetry(ExponentialBackoff(10*ms, 50*ms), 6),
			func(int) time.Duration { return 0 },
			func(i int) time.Duration { return min(10*ms<<i, 50*ms) - time.Nanosecond }},
		{"default", nil,
			func(int) time.Duration { return 10 * ms },
			func(int) time.Duration { return 200*ms - time.Nanosecond }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				for _, f := range fakes {
					f.set("redlock:{k}", "other", -1)
				}
				times := &tryTimes{}
				times.watch(fakes[0])
				c := newTestClient(t, fakes)
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				var opts []Option
				if tc.strategy != nil {
					opts = append(opts, WithRetry(tc.strategy))
				}
				_, err := c.Lock(ctx, "k", opts...)
				require.ErrorIs(t, err, ErrNotObtained)
				synctest.Wait() // Lock returns at a majority: the last node's call may not have run yet
				gaps := times.gaps()
				require.Equal(t, 1, times.acquires, "attempts: one, then looks at the queue while the key is held")
				if tc.strategy == nil {
					require.ErrorIs(t, err, context.DeadlineExceeded, "the default retries until the context ends")
					require.Greater(t, len(gaps), 10, "2 s of retries at most 200 ms apart")
				} else {
					require.NotErrorIs(t, err, context.DeadlineExceeded, "the limited strategy gave up by itself")
					require.Len(t, gaps, map[string]int{"linear": 5, "exponential": 6}[tc.name])
				}
				for i, g := range gaps {
					assert.True(t, g >= tc.lo(i) && g <= tc.hi(i), "gap %d: %v, want in [%v, %v]", i, g, tc.lo(i), tc.hi(i))
				}
			})
		})
	}
}

// TestLockCutShortReportsTheTryBefore: a Lock whose context ends while a
// try is in flight, before any node answered it, reports the try before
// (the key held by another token) rather than a round of nothing but
// deadline errors. (The command's exit status depends on it: 75 "held
// elsewhere" rather than 69 "nodes unreachable"; its test failed once in
// 30 runs.) Every node takes 100 ms to answer. A look at the queue cut
// short: tries 50 ms apart, a wait of 300 ms; the first attempt is refused
// at 100 ms, the Lock joins the queue (answered at 200 ms), and its next
// look, sent at 250 ms, is cut short at 300. An attempt cut short: the
// holder's key expires at 150 ms, so the join (answered at 200 ms) finds
// the Lock first and the key free; the attempt it sends is cut short at
// 250 ms.
func TestLockCutShortReportsTheTryBefore(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		holderTTL time.Duration // -1: none
		wait      time.Duration
	}{
		{"look at the queue", -1, 300 * ms},
		{"attempt", 150 * ms, 250 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				for _, f := range fakes {
					f.set("redlock:{k}", "other", tc.holderTTL)
					f.delay = 100 * ms
				}
				c := newTestClient(t, fakes)
				ctx, cancel := context.WithTimeout(t.Context(), tc.wait)
				defer cancel()
				_, err := c.Lock(ctx, "k", WithRetry(LinearBackoff(50*ms, 50*ms)))
				require.ErrorIs(t, err, ErrNotObtained)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				requireRefusedAs(t, err, ErrHeld) // the first attempt's answers
			})
		})
	}
}

func TestLockRetries(t *testing.T) {
	t.Run("until the holder's key expires", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fakes := newFakeNodes(3)
			for _, f := range fakes {
				f.set("redlock:{k}", "other", 100*time.Millisecond)
			}
			c := newTestClient(t, fakes)
			var delays []int
			retry := RetryStrategy(func(failed int) (time.Duration, bool) {
				delays = append(delays, failed)
				return 40 * time.Millisecond, true
			})
			start := time.Now()
			_, err := c.Lock(t.Context(), "k", WithRetry(retry))
			require.NoError(t, err)
			require.Equal(t, []int{1, 2, 3}, delays, "Delay calls")
			// Attempts at 0, 40 and 80 ms; the third wait is cut to the
			// holder's remaining 20 ms + 1 ms.
			require.Equal(t, 101*time.Millisecond, time.Since(start))
		})
	})
	t.Run("limited", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fakes := newFakeNodes(3)
			for _, f := range fakes {
				f.set("redlock:{k}", "other", -1)
			}
			times := &tryTimes{}
			times.watch(fakes[0])
			c := newTestClient(t, fakes)
			_, err := c.Lock(t.Context(), "k", WithRetry(LimitRetry(RandomBackoff(time.Millisecond, time.Millisecond), 2)))
			require.ErrorIs(t, err, ErrNotObtained)
			require.NotErrorIs(t, err, context.Canceled)
			c.bg.Wait() // fail-fast may return before every node was called
			require.Len(t, times.start, 3, "tries: an attempt, then two looks at the queue")
			require.Equal(t, 1, times.acquires, "attempts")
		})
	})
	t.Run("cancelled while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fakes := newFakeNodes(3)
			for _, f := range fakes {
				f.set("redlock:{k}", "other", -1)
			}
			c := newTestClient(t, fakes)
			ctx, cancel := context.WithCancel(t.Context())
			retry := RetryStrategy(func(int) (time.Duration, bool) { cancel(); return time.Hour, true })
			_, err := c.Lock(ctx, "k", WithRetry(retry))
			require.ErrorIs(t, err, ErrNotObtained)
			require.ErrorIs(t, err, context.Canceled)
			var qe *QuorumError
			require.ErrorAs(t, err, &qe)
			require.Len(t, qe.Nodes, 3, "the last attempt's node errors: %v", err)
		})
	})
}

func TestRetryAfter(t *testing.T) {
	c := newTestClient(t, newFakeNodes(5))
	held := func(token string, pttl time.Duration) wire.Result {
		return wire.Result{Status: wire.StatusHeld, Value: token, PTTL: pttl}
	}
	heldKey := func(token string, key int, pttl time.Duration) wire.Result {
		r := held(token, pttl)
		r.Detail = &wire.Detail{Key: int32(key)}
		return r
	}
	ok, down := wire.Result{Status: wire.StatusOK}, wire.Result{Err: errFakeDown}
	plainHeld := wire.Result{Status: wire.StatusHeld, PTTL: wire.PTTLUnknown}
	const rt = time.Millisecond
	for _, tc := range []struct {
		name    string
		results []wire.Result
		lo, hi  time.Duration // want a value in [lo, hi]; 0, 0: no bound
	}{
		{"holder with a majority", []wire.Result{held("A", 10*time.Millisecond), held("A", 30*time.Millisecond), held("A", 20*time.Millisecond), ok, ok}, 31 * time.Millisecond, 31 * time.Millisecond},
		{"holder without TTL", []wire.Result{held("A", 10*time.Millisecond), held("A", -1), held("A", 20*time.Millisecond), ok, down}, 0, 0},
		{"split vote", []wire.Result{held("A", time.Minute), held("A", time.Minute), held("B", time.Minute), held("B", time.Minute), ok}, time.Microsecond, 2*rt + time.Microsecond},
		{"plain refusals: no holder named", []wire.Result{plainHeld, plainHeld, plainHeld, ok, down}, 0, 0}, // the look tells
		{"majority down", []wire.Result{held("A", time.Minute), ok, down, down, down}, 0, 0},
		// A set's refusals name the key (its index) as well as its holder.
		{"a set's keys held by two holders", []wire.Result{heldKey("A", 0, time.Second), heldKey("A", 0, time.Second), heldKey("B", 1, time.Minute), heldKey("B", 1, time.Minute), ok}, time.Minute + time.Millisecond, time.Minute + time.Millisecond},
		{"a set's keys held by two holders, one without TTL", []wire.Result{heldKey("A", 0, time.Second), heldKey("A", 0, -1), heldKey("B", 1, time.Minute), heldKey("B", 1, time.Minute), ok}, 0, 0},
		{"a set's keys held by one holder, named for two keys", []wire.Result{heldKey("A", 0, time.Second), heldKey("A", 1, time.Minute), ok, down, down}, time.Minute + time.Millisecond, time.Minute + time.Millisecond},
		// Two tokens on one key: contenders, whatever else is held.
		{"a set's split vote", []wire.Result{heldKey("A", 0, time.Minute), heldKey("A", 0, time.Minute), heldKey("B", 0, time.Minute), down, down}, time.Microsecond, 2*rt + time.Microsecond},
		{"a set's split vote beside another key's holder", []wire.Result{heldKey("A", 0, time.Minute), heldKey("B", 0, time.Minute), heldKey("C", 1, time.Minute), ok, ok}, time.Microsecond, 2*rt + time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := retryHint(&round{results: tc.results}, c.quorum(), rt, strings.HasPrefix(tc.name, "a set"))
			if got < tc.lo || got > tc.hi {
				t.Fatalf("got %v, want in [%v, %v]", got, tc.lo, tc.hi)
			}
		})
	}
}

// TestLockAfterPlainSplit: a Lock whose plain first attempt (SET NX) is
// refused by the grants of a split vote (another contender's token on each
// node, each taken back as soon as the waiter's first look at the queue has
// seen it) looks again within rounds, not after its strategy's delay (an
// hour here): a plain refusal does not say who holds the key, but the look
// does, and no token holds a majority. Without that, the look's PTTL
// bounded the wait, and the waiter slept for it with the key free (the
// simulator's seed 483: the first waiter of a key slept 190 ms of its
// strategy's delay).
func TestLockAfterPlainSplit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		c := newTestClient(t, fakes)
		rkey := c.redisKey("k")
		for i, f := range fakes {
			f.set(rkey, fmt.Sprint("contender", i), time.Minute)
			var once sync.Once
			f.ran = func(o *wire.Op) {
				if o.Kind == wire.OpQueue {
					once.Do(func() { f.mem.Do("DEL", rkey) })
				}
			}
		}
		start := time.Now()
		l, err := c.Lock(t.Context(), "k", waitHour)
		require.NoError(t, err)
		require.Less(t, time.Since(start), 10*time.Millisecond, "the waiter slept with the key free")
		require.NoError(t, l.Unlock(t.Context()))
	})
}
