package redlock

import (
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
		opts []LockOption
	}{
		{"empty key", "", nil},
		{"key too long", strings.Repeat("k", MaxKeyLen+1), nil},
		{"zero TTL", "k", []LockOption{WithTTL(0)}},
		{"negative TTL", "k", []LockOption{WithTTL(-time.Second)}},
		{"TTL under 1ms", "k", []LockOption{WithTTL(time.Microsecond)}},
		{"TTL leaves no validity", "k", []LockOption{WithTTL(2 * time.Millisecond)}},
		{"TTL over the cap", "k", []LockOption{WithTTL(MaxTTL + time.Second)}},
		{"nil retry", "k", []LockOption{WithRetry(nil)}},
		{"metadata too long", "k", []LockOption{WithMetadata(strings.Repeat("m", MaxMetadataLen+1))}},
		{"empty token", "k", []LockOption{WithToken("")}},
		{"token with NUL", "k", []LockOption{WithToken("a\x00b")}},
		{"token too long", "k", []LockOption{WithToken(strings.Repeat("t", MaxTokenLen+1))}},
		{"nil option", "k", []LockOption{nil}},
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newClient([]node{fakes[0], fakes[1], fakes[2]}, tc.opts)
			require.ErrorIs(t, err, ErrInvalidArgument)
		})
	}
}
