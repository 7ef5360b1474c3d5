package redlock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides whether [Client.Lock] tries again after a failed
// attempt, and after how long. Delay is called with the number of attempts
// that have failed so far (1 after the first) and returns the delay before the
// next one, or false to give up. A strategy holds no state of its own, so one
// value may serve any number of concurrent Lock calls.
//
// However long the delay, Lock stops waiting as soon as its context is done.
type RetryStrategy interface {
	Delay(failed int) (time.Duration, bool)
}

// RetryFunc adapts a function to [RetryStrategy].
type RetryFunc func(failed int) (time.Duration, bool)

// Delay calls f.
func (f RetryFunc) Delay(failed int) (time.Duration, bool) { return f(failed) }

// NoRetry makes Lock give up after the first failed attempt, like
// [Client.TryLock].
func NoRetry() RetryStrategy {
	return RetryFunc(func(int) (time.Duration, bool) { return 0, false })
}

// ConstantBackoff waits d before every retry.
func ConstantBackoff(d time.Duration) RetryStrategy {
	return RetryFunc(func(int) (time.Duration, bool) { return max(d, 0), true })
}

// LinearBackoff waits step after the first failure, 2×step after the second,
// and so on, never more than ceiling.
func LinearBackoff(step, ceiling time.Duration) RetryStrategy {
	return RetryFunc(func(failed int) (time.Duration, bool) {
		if step <= 0 {
			return 0, true
		}
		if failed > int(ceiling/step) {
			return max(ceiling, 0), true
		}
		return time.Duration(max(failed, 1)) * step, true
	})
}

// ExponentialBackoff waits a random time in [0, min(ceiling, base×2^(failed−1)))
// ("full jitter"): contending clients spread out instead of retrying in step.
func ExponentialBackoff(base, ceiling time.Duration) RetryStrategy {
	return RetryFunc(func(failed int) (time.Duration, bool) {
		limit, shift := ceiling, max(failed-1, 0)
		if base > 0 && shift < 62 && base <= ceiling>>shift {
			limit = base << shift
		}
		return jitter(0, limit), true
	})
}

// RandomBackoff waits a random time in [lo, hi) before every retry. It is the
// default strategy, with lo 10 ms and hi 200 ms.
func RandomBackoff(lo, hi time.Duration) RetryStrategy {
	return RetryFunc(func(int) (time.Duration, bool) { return jitter(lo, hi), true })
}

// LimitRetry allows at most retries retries of s: Lock makes at most
// retries+1 attempts.
func LimitRetry(s RetryStrategy, retries int) RetryStrategy {
	return RetryFunc(func(failed int) (time.Duration, bool) {
		if failed > retries {
			return 0, false
		}
		return s.Delay(failed)
	})
}

// defaultRetry is the strategy Lock uses when none is given: a random delay in
// [10 ms, 200 ms), until the context ends.
var defaultRetry = RandomBackoff(10*time.Millisecond, 200*time.Millisecond)

// jitter returns a random duration in [lo, hi), or lo when the range is empty.
func jitter(lo, hi time.Duration) time.Duration {
	lo = max(lo, 0)
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo)
}
