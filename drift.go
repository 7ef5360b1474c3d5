package redlock

import "time"

// driftFloor is added to every drift estimate: Redis expires keys with 1 ms
// resolution, and one more millisecond covers the rounding of the TTL we send.
const driftFloor = 2 * time.Millisecond

// drift is the part of a TTL that cannot be trusted: the clock-rate difference
// between this process and the nodes (ttl × factor) plus [driftFloor].
func drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + driftFloor
}

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

// clock is the seam through which the library reads the time, so tests can
// drive validity arithmetic without sleeping. Only validity uses it; node
// timeouts use real timers.
type clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }
