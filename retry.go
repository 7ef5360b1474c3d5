package redlock

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// RetryStrategy decides whether [Client.Lock] tries again after a failed
// try, and after how long. It is called with the number of tries that have
// failed so far (1 after the first) and returns the delay before the next
// one, or false to give up. A try is an attempt, or, for a Lock queued
// behind other waiters, a look at the wait queue (which refreshes its place
// and goes on to an attempt when it finds the Lock first with the key
// free): a queued Lock that is not first never attempts, whatever its
// strategy. A strategy holds no state of its own, so one value may serve
// any number of concurrent Lock calls; any function of this shape is one.
//
// However long the delay, Lock tries again as soon as a release names it
// first in the queue, never waits longer than the holder's remaining TTL
// (or than a third of its waiter lease, to refresh its place), and stops
// waiting as soon as its context is done.
type RetryStrategy func(failed int) (time.Duration, bool)

// NoRetry makes Lock give up after the first failed attempt, like
// [Client.TryLock].
func NoRetry() RetryStrategy {
	return func(int) (time.Duration, bool) { return 0, false }
}

// LinearBackoff waits step after the first failure, 2×step after the
// second, and so on, never more than ceiling.
func LinearBackoff(step, ceiling time.Duration) RetryStrategy {
	return func(failed int) (time.Duration, bool) {
		if step <= 0 {
			return 0, true
		}
		if failed > int(ceiling/step) {
			return max(ceiling, 0), true
		}
		return time.Duration(max(failed, 1)) * step, true
	}
}

// ExponentialBackoff waits a random time in
// [0, min(ceiling, base×2^(failed−1))) ("full jitter"): contending clients
// spread out instead of retrying in step.
func ExponentialBackoff(base, ceiling time.Duration) RetryStrategy {
	return func(failed int) (time.Duration, bool) {
		limit, shift := ceiling, max(failed-1, 0)
		if base > 0 && shift < 62 && base <= ceiling>>shift {
			limit = base << shift
		}
		return jitter(0, limit), true
	}
}

// RandomBackoff waits a random time in [lo, hi) before every retry, or lo
// when hi ≤ lo (a constant delay). It is the default strategy, with lo
// 10 ms and hi 200 ms.
func RandomBackoff(lo, hi time.Duration) RetryStrategy {
	return func(int) (time.Duration, bool) { return jitter(lo, hi), true }
}

// LimitRetry allows at most retries retries of s: Lock makes at most
// retries+1 tries (attempts, or looks at the wait queue), so it also bounds
// how many delays of s a queued Lock waits.
func LimitRetry(s RetryStrategy, retries int) RetryStrategy {
	return func(failed int) (time.Duration, bool) {
		if failed > retries || s == nil {
			return 0, false
		}
		return s(failed)
	}
}

// jitter returns a random duration in [lo, hi), or lo when the range is
// empty.
func jitter(lo, hi time.Duration) time.Duration {
	lo = max(lo, 0)
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}

// retryHint bounds the wait after a failed attempt that took round. If one
// token refused on a majority of nodes, it holds the lock, whose keys are
// gone at the latest when its longest PTTL runs out (no bound if a key has
// no TTL). If no token holds a majority while a majority of nodes answered,
// nobody holds the lock: a split vote between contenders, or keys on their
// way out. Then waiting for a release notice would wait for nothing, so the
// answer is a random delay of up to two rounds, which parts the
// contenders. (A plain acquire's refusal names no holder: its Lock's look
// at the queue tells, see pollQueue.) A multi-key set (set) refused by more than one token
// differs: each node names the holder of the first of its keys another
// token holds (and which key: wire.Detail.Key), and the holders of
// different keys need not show a majority each to hold them all (a key
// held on a bare majority lets the other nodes name another key's
// holder; a round decided at a majority of refusals hears no more). Where
// each key named has one holder, the keys are gone at the latest when the
// longest PTTL among them runs out: look again then (others may be held
// longer; the next refusal names them). Two tokens named for one key are
// contenders of a split vote, as for one key. With too many nodes failing
// there is no bound: the retry strategy decides.
func retryHint(r *round, quorum int, round time.Duration, set bool) time.Duration {
	type holder struct {
		token string
		key   int // which of the set's keys
		n     int
		pttl  time.Duration // longest
		noTTL bool          // some key of it has no TTL
	}
	var holders []holder
	answered := 0
	for _, res := range r.results {
		switch {
		case res.Guarded: // a restarted node's grant: as good as no answer
		case res.Status == wire.StatusOK, res.Status == wire.StatusRefreshed, res.Status == wire.StatusAbsent:
			answered++
		case res.Status == wire.StatusHeld:
			answered++
			key := int(res.Details().Key)
			i := slices.IndexFunc(holders, func(h holder) bool { return h.token == res.Value && h.key == key })
			if i < 0 {
				holders, i = append(holders, holder{token: res.Value, key: key}), len(holders)
			}
			h := &holders[i]
			h.n++
			h.pttl, h.noTTL = max(h.pttl, res.PTTL), h.noTTL || res.PTTL < 0
		}
	}
	for _, h := range holders {
		if h.n >= quorum {
			if h.noTTL {
				return 0
			}
			return h.pttl + time.Millisecond
		}
	}
	split := false
	for i, a := range holders {
		split = split || slices.ContainsFunc(holders[i+1:], func(b holder) bool { return b.key == a.key && b.token != a.token })
	}
	if set && len(holders) > 1 && !split {
		var longest time.Duration
		for _, h := range holders {
			if h.noTTL {
				return 0
			}
			longest = max(longest, h.pttl)
		}
		return longest + time.Millisecond
	}
	if answered >= quorum {
		return jitter(time.Microsecond, 2*round+time.Microsecond)
	}
	return 0
}
