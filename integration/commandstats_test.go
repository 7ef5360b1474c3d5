package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// What the nodes ran, counted by redis-server itself (INFO commandstats):
// for tests that say which commands an operation sends.

// commandCalls returns how many times node n ran each command since its
// stats were last reset (INFO commandstats).
func commandCalls(t *testing.T, n *Node) map[string]int {
	t.Helper()
	return commandStat(t, Admin(t, n), "calls")
}

// commandStat reads one field of INFO commandstats (calls, rejected_calls,
// failed_calls) for every command the server behind admin has seen.
func commandStat(t testing.TB, admin *redis.Client, field string) map[string]int {
	t.Helper()
	info, err := admin.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	stat := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				if stat[strings.TrimPrefix(name, "cmdstat_")], err = strconv.Atoi(v); err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
			}
		}
	}
	return stat
}

// countedCycles runs a TryLock+Unlock on a fresh key (the connections'
// first scripts), waits for its release on every node, resets the nodes'
// command stats, and runs cycles more, each on a fresh key, with check
// (if not nil) given each lock. It closes c (which waits for the calls
// still on their way to the slowest node) and returns each node's
// command calls since the reset.
func countedCycles(t *testing.T, nodes []*Node, c *redlock.Client, cycles int, check func(*redlock.Lock)) []map[string]int {
	t.Helper()
	try := func(ctx context.Context, keys []string) (*redlock.Lock, error) { return c.TryLock(ctx, keys[0]) }
	return countedCyclesOf(t, nodes, c, 1, cycles, try, check)
}

// countedCyclesOf is countedCycles for a lock of n fresh keys at a time,
// taken by try.
func countedCyclesOf(t *testing.T, nodes []*Node, c *redlock.Client, n, cycles int, try func(context.Context, []string) (*redlock.Lock, error), check func(*redlock.Lock)) []map[string]int {
	t.Helper()
	ctx := t.Context()
	fresh := func() []string {
		key, keys := UniqueKey(t, nodes), make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("%s-%d", key, i)
		}
		return keys
	}
	cycle := func(keys []string) {
		l, err := try(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		if check != nil {
			check(l)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	first := fresh()
	cycle(first)
	for _, k := range first {
		waitEmpty(t, nodes, k, 10*time.Second)
	}
	for _, n := range nodes {
		if err := Admin(t, n).ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for range cycles {
		cycle(fresh())
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	calls := make([]map[string]int, len(nodes))
	for i, n := range nodes {
		calls[i] = commandCalls(t, n)
	}
	return calls
}
