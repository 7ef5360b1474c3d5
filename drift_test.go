package redlock

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDrift(t *testing.T) {
	start := time.Unix(0, 0)
	for _, tc := range []struct {
		ttl     time.Duration
		factor  float64
		elapsed time.Duration
		want    time.Duration
	}{
		{10 * time.Second, 0.01, 0, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, 0.01, 100 * time.Millisecond, 10*time.Second - 202*time.Millisecond},
		{10 * time.Second, 0, 0, 10*time.Second - 2*time.Millisecond},
		{time.Second, 0.5, 0, 498 * time.Millisecond},
		{time.Second, 0.01, time.Second, 0}, // clamped
		{3 * time.Millisecond, 0, 0, time.Millisecond},
	} {
		if got := validity(tc.ttl, tc.factor, start, start.Add(tc.elapsed)); got != tc.want {
			t.Errorf("validity(%v, %v, elapsed %v): got %v, want %v", tc.ttl, tc.factor, tc.elapsed, got, tc.want)
		}
	}
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		want   bool
	}{
		{2 * time.Millisecond, 0, false},
		{2*time.Millisecond + 1, 0, true},
		{2 * time.Millisecond, 0.5, false},
		{4 * time.Millisecond, 0.5, false},
		{5 * time.Millisecond, 0.5, true},
	} {
		if got := canBeValid(tc.ttl, tc.factor); got != tc.want {
			t.Errorf("canBeValid(%v, %v): got %v, want %v", tc.ttl, tc.factor, got, tc.want)
		}
	}
}

// TestValidityWindow: a lock is valid until the start of its attempt plus
// TTL minus drift, and Validity counts down on the monotonic clock.
func TestValidityWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestClient(t, newFakeNodes(3))
		start := time.Now()
		l, err := c.TryLock(t.Context(), "k", WithTTL(testTTL))
		require.NoError(t, err)
		want := start.Add(testTTL - testTTL/100 - 2*time.Millisecond)
		require.Equal(t, want, l.validUntil())
		time.Sleep(time.Second)
		require.Equal(t, time.Until(want), l.Validity())
		time.Sleep(testTTL)
		require.Zero(t, l.Validity(), "after expiry")
	})
}

// TestValidityUsedUp: a majority that arrives after the validity ran out is a
// failed attempt, and the keys it created are released.
func TestValidityUsedUp(t *testing.T) {
	maxValidity := testTTL - testTTL/100 - 2*time.Millisecond
	for _, tc := range []struct {
		name    string
		elapsed time.Duration
		ok      bool
	}{
		{"well inside", 100 * time.Millisecond, true},
		{"just inside", maxValidity - time.Nanosecond, true},
		{"exactly at the end", maxValidity, false},
		{"past the end", testTTL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fakes := newFakeNodes(3)
				fakes[0].delay = tc.elapsed // the slow node of the majority {0, 1}
				fakes[2].setErr(errFakeDown)
				c := newTestClient(t, fakes, WithNodeTimeout(time.Hour))
				l, err := c.TryLock(t.Context(), "k", WithTTL(testTTL))
				if tc.ok {
					require.NoError(t, err)
					require.Equal(t, maxValidity-tc.elapsed, l.Validity())
					return
				}
				require.ErrorIs(t, err, ErrNotObtained)
				require.ErrorContains(t, err, "validity ran out")
				c.bg.Wait()
				for i, f := range fakes {
					v, held := f.value("redlock:{k}")
					require.False(t, held, "node %d still holds %q", i, v)
				}
			})
		})
	}
}
