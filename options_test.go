package redlock

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOptionValidation(t *testing.T) {
	fakes := newFakeNodes(3)
	c := newTestClient(t, fakes)
	for _, tc := range []struct {
		name string
		key  string
		opts []Option
	}{
		{"empty key", "", nil},
		{"key too long", strings.Repeat("k", maxKeyLen+1), nil},
		{"zero TTL", "k", []Option{WithTTL(0)}},
		{"negative TTL", "k", []Option{WithTTL(-time.Second)}},
		{"TTL under 1ms", "k", []Option{WithTTL(time.Microsecond)}},
		{"TTL leaves no validity", "k", []Option{WithTTL(2 * time.Millisecond)}},
		{"TTL over the cap", "k", []Option{WithTTL(maxTTL + time.Second)}},
		{"nil retry", "k", []Option{WithRetry(nil)}},
		{"metadata too long", "k", []Option{WithMetadata(strings.Repeat("m", maxMetadataLen+1))}},
		{"metadata starting with the queue's mark", "k", []Option{WithMetadata("\x02host")}},
		{"empty token", "k", []Option{WithToken("")}},
		{"token with NUL", "k", []Option{WithToken("a\x00b")}},
		{"token too long", "k", []Option{WithToken(strings.Repeat("t", maxTokenLen+1))}},
		{"nil option", "k", []Option{nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Lock(t.Context(), tc.key, tc.opts...)
			assert.ErrorIs(t, err, ErrInvalidArgument, "Lock")
			_, err = c.TryLock(t.Context(), tc.key, tc.opts...)
			assert.ErrorIs(t, err, ErrInvalidArgument, "TryLock")
		})
	}
	require.Zero(t, fakes[0].calls.Load(), "rejected calls contacted the nodes")
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"drift negative", []Option{WithDriftFactor(-0.1)}},
		{"drift one", []Option{WithDriftFactor(1)}},
		{"drift NaN", []Option{WithDriftFactor(math.NaN())}},
		{"node timeout zero", []Option{WithNodeTimeout(0)}},
		{"prefix with brace", []Option{WithKeyPrefix("a{")}},
		{"TTL too short for drift", []Option{WithDriftFactor(0.5), WithTTL(4 * time.Millisecond)}},
		{"nil option", []Option{nil}},
		{"waiter lease zero", []Option{WithWaiterLease(0)}},
		{"waiter lease below 10 ms", []Option{WithWaiterLease(9 * time.Millisecond)}},
		{"waiter lease above an hour", []Option{WithWaiterLease(time.Hour + 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newClient([]node{fakes[0], fakes[1], fakes[2]}, tc.opts)
			require.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
}

// TestOptionScope: an option given where it does not apply is rejected,
// with the place it belongs to, before any node is asked.
func TestOptionScope(t *testing.T) {
	fakes := newFakeNodes(3)
	nodes := []node{fakes[0], fakes[1], fakes[2]}
	_, err := newClient(nodes, []Option{WithToken("t")})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "WithToken applies to one lock")
	c := newTestClient(t, fakes)
	for _, o := range []Option{WithNodeTimeout(time.Second), WithDriftFactor(0.1), WithKeyPrefix("x:"),
		WithRestartGuard(0), WithAnyNodeCount(), WithObserver(func(Event) {}), WithLogger(nil), WithWaiterLease(time.Second)} {
		_, err := c.Lock(t.Context(), "k", o)
		require.ErrorIs(t, err, ErrInvalidArgument)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "pass it to New") && !strings.Contains(err.Error(), "nil observer") {
			t.Errorf("got %v, want it to say the option belongs to New", err)
		}
	}
	// Options for both set the Client's default for every lock.
	c2, err := newClient(nodes, []Option{WithTTL(time.Minute), WithMetadata("m"), WithAnyNodeCount()})
	require.NoError(t, err)
	defer c2.Close(t.Context())
	require.Equal(t, time.Minute, c2.cfg.lock.ttl)
	require.Equal(t, "m", c2.cfg.lock.meta)
	require.Zero(t, fakes[0].calls.Load(), "a rejected option reached a node")
}
