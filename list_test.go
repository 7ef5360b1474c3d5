package redlock

import (
	"context"
	"testing"
	"time"

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

// scanningFake is a fake node that lists keys as nodeio's Scan does: it
// stops once it has more than limit of them.
type scanningFake struct {
	*fakeNode
	keys []string
}

func (n scanningFake) Scan(_ context.Context, _ string, limit int, _ time.Duration) ([]string, error) {
	if limit > 0 && len(n.keys) > limit {
		return n.keys[:limit+1], nil
	}
	return n.keys, nil
}

// TestListCappedScan: a node's scan stops at five Redis keys per lock key
// asked for; one lock with more beside it (its queue, look numbers, the
// lists of two waiting sets) fills the cap, and the lock after it is not
// read. The listing says it may be incomplete, where it said nothing.
func TestListCappedScan(t *testing.T) {
	x := "redlock:{x}"
	n := scanningFake{newFakeNodes(1)[0], []string{x, x + ":queue", x + ":lease", x + ":seq", x + ":set:c.wis1", x + ":set:c.wis2", "redlock:{y}"}}
	c, err := newClient([]node{n}, []Option{WithAnyNodeCount()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	l, err := c.List(t.Context(), "*", 1)
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, l.Keys)
	require.True(t, l.Truncated, "y never read, and the listing did not say so")
	l, err = c.List(t.Context(), "*", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, l.Keys)
	require.False(t, l.Truncated)
}
