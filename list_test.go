package redlock

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListArguments: a bad pattern or limit is an ErrInvalidArgument, at
// once; nodes that cannot scan (these in-memory ones) are reported per
// node, not as List's error.
func TestListArguments(t *testing.T) {
	c := newTestClient(t, newFakeNodes(3))
	ctx := context.Background()
	for _, tc := range []struct {
		pattern string
		limit   int
	}{{"", 0}, {"{a}", 0}, {"a}", 0}, {"*", -1}} {
		_, err := c.List(ctx, tc.pattern, tc.limit)
		require.ErrorIs(t, err, ErrInvalidArgument, "%q %d", tc.pattern, tc.limit)
	}
	l, err := c.List(ctx, "*", 0)
	require.NoError(t, err)
	require.Empty(t, l.Keys)
	require.Len(t, l.ScanErrors, 3)
	for _, err := range l.ScanErrors {
		require.ErrorIs(t, err, errNoScan)
	}
}

// TestLockKeys: Redis keys become the lock keys they belong to: a queue's,
// a fence counter's and a read-write lock's readers' fold into their
// lock's; other prefixes are left out; limit cuts the sorted list.
func TestLockKeys(t *testing.T) {
	c := newTestClient(t, newFakeNodes(1))
	found := []string{
		"redlock:{b}", "redlock:{b}:queue", "redlock:{b}:lease", "redlock:{a}:fence",
		"redlock:{rw:cfg}:readers", "redlock:{sem:pool:1}", "other:{x}", "redlock:{}", "redlock:{b}",
	}
	keys, truncated := c.lockKeys(found, 0)
	require.Equal(t, []string{"a", "b", "rw:cfg", "sem:pool:1"}, keys)
	require.False(t, truncated)
	keys, truncated = c.lockKeys(found, 2)
	require.Equal(t, []string{"a", "b"}, keys)
	require.True(t, truncated)
}
