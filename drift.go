package redlock

import "time"

// driftFloor is added to every drift estimate: Redis expires keys with 1 ms
// resolution, and one more millisecond covers the rounding of the TTL we send.
const driftFloor = 2 * time.Millisecond

// drift is the part of a TTL that cannot be trusted: the clock-rate difference
// between this process and the nodes (ttl × factor) plus [driftFloor].
func drift(ttl time.Duration, factor float64) time.Duration {
	if mutated(mutDriftLeftOut) {
		return 0
	}
	return time.Duration(float64(ttl)*factor) + driftFloor
}

// Every duration comes from time.Now's monotonic reading: the start of an
// attempt, the moment a majority answered, the timers of auto-extension.
// There is no clock seam: the root package's tests run the library in
// virtual time with testing/synctest, where time.Now and every timer move
// only when every goroutine of the test is blocked.

// validity is what is left of a lock whose acquisition began at start and
// ended (majority reached) at end: ttl − (end − start) − drift, clamped at 0.
// start and end must come from the same monotonic clock.
func validity(ttl time.Duration, factor float64, start, end time.Time) time.Duration {
	v := ttl - end.Sub(start) - drift(ttl, factor)
	if v < 0 {
		return 0
	}
	return v
}

// canBeValid reports whether a lock with this ttl can ever have positive
// validity, even if acquired in no time at all.
func canBeValid(ttl time.Duration, factor float64) bool {
	return ttl-drift(ttl, factor) > 0
}
