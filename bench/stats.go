package main

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// sorted returns a sorted copy.
func sorted[T cmp.Ordered](xs []T) []T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s
}

// pct returns the q-quantile of sorted s by the nearest-rank method: the
// smallest value with at least q of the values at or below it.
func pct[T cmp.Ordered](s []T, q float64) T {
	var zero T
	if len(s) == 0 {
		return zero
	}
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// median of xs (the lower middle value for an even count, so that it is
// always one of the measured values).
func median[T cmp.Ordered](xs []T) T {
	return pct(sorted(xs), 0.5)
}

// fmtDur prints a duration with three significant figures in a fitting unit.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "–"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}
