package nodeio

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScanCount is the COUNT a scan asks each SCAN call for: how many keys the
// node looks at per call, whatever matches. With a million keys a node
// answers a thousand calls, each short, so that a scan never holds a
// node for long.
const ScanCount = 1000

// Scan returns the keys of the node that match the glob match, read with
// SCAN (never KEYS): every master of a Cluster. Each call is bounded by
// callTimeout; ctx bounds the whole scan. It stops once it has more than
// limit keys (0: no limit); the keys may then be any of those matching.
// A key may be listed twice (SCAN's promise): callers deduplicate.
func (n *Node) Scan(ctx context.Context, match string, limit int, callTimeout time.Duration) ([]string, error) {
	if n.cluster == nil {
		return scanOne(ctx, n.client, match, limit, callTimeout)
	}
	var (
		mu   sync.Mutex
		keys []string
	)
	err := n.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		got, err := scanOne(ctx, c, match, limit, callTimeout)
		mu.Lock()
		defer mu.Unlock()
		keys = append(keys, got...)
		return err
	})
	return keys, err
}

// scanOne scans one server.
func scanOne(ctx context.Context, c redis.Cmdable, match string, limit int, callTimeout time.Duration) ([]string, error) {
	var (
		keys   []string
		cursor uint64
	)
	for {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		page, next, err := scanCall(cctx, c, cursor, match)
		cancel()
		if err != nil {
			return keys, err
		}
		keys = append(keys, page...)
		if next == 0 || limit > 0 && len(keys) > limit {
			return keys, nil
		}
		cursor = next
	}
}

// scanCall makes one SCAN call, which ends at ctx's deadline even on a
// client that ignores context deadlines on reads (a frozen node).
func scanCall(ctx context.Context, c redis.Cmdable, cursor uint64, match string) ([]string, uint64, error) {
	type reply struct {
		keys []string
		next uint64
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		keys, next, err := c.Scan(ctx, cursor, match, ScanCount).Result()
		done <- reply{keys, next, err}
	}()
	select {
	case r := <-done:
		return r.keys, r.next, r.err
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}
