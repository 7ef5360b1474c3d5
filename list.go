package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Listing is what [Client.List] found: the lock keys on the nodes, each
// with what every node holds at it.
type Listing struct {
	Keys   []string    // the lock keys found (as Lock takes them: "rw:NAME", "sem:NAME:0", ...), sorted
	States []*KeyState // by key, as [Client.Inspect] reports each
	// ScanErrors has an error, naming its node, for each node whose scan
	// failed: a key held only there is not listed (the keys listed still
	// show what that node holds, if it answered their inspection).
	ScanErrors []error
	// Truncated reports that more keys may match than Keys lists: more
	// matched than the limit (Keys is then the first limit of them in sort
	// order among those read), or a node's scan stopped at its cap of
	// Redis keys (see scanAll) before it had read them all.
	Truncated bool
}

// listScanTimeout bounds each SCAN call of a List; listBatch is the most
// keys one inspection batch asks a node about.
const (
	listScanTimeout = time.Second
	listBatch       = 1000
)

// List finds the lock keys whose names match pattern (a glob, as Redis's
// SCAN MATCH takes it: "*" for every lock, "orders:*"), on every node, and
// inspects each of them as [Client.Inspect] does. It reads with SCAN, never
// KEYS, a thousand keys a call, so that a node with millions of other keys
// is never held for long; it writes nothing. Each SCAN call is bounded by
// a second and each inspection by the node timeout: a node that does not
// answer costs that, and its keys show as not answered. limit (0: none)
// bounds how many keys are inspected. The error is non-nil only for an
// invalid pattern, a closed Client or a done ctx; node failures are in
// ScanErrors and in the states.
func (c *Client) List(ctx context.Context, pattern string, limit int) (*Listing, error) {
	if pattern == "" || strings.ContainsAny(pattern, "{}") {
		return nil, invalid("pattern %q: want a non-empty glob without braces", pattern)
	}
	if limit < 0 {
		return nil, invalid("limit %d is negative", limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	found, capped, scanErrs := c.scanAll(ctx, c.cfg.prefix+"{"+pattern+"}*", limit)
	keys, truncated := c.lockKeys(found, limit)
	truncated = truncated || capped
	states := make([]*KeyState, 0, len(keys))
	for batch := range slices.Chunk(keys, listBatch) {
		s, err := c.inspect(ctx, batch, "")
		if err != nil {
			return nil, err
		}
		states = append(states, s...)
	}
	return &Listing{Keys: keys, States: states, ScanErrors: scanErrs, Truncated: truncated}, nil
}

// scanner is a node that can list its keys (nodeio.Node).
type scanner interface {
	Scan(ctx context.Context, match string, limit int, callTimeout time.Duration) ([]string, error)
}

// errNoScan: a node that cannot list its keys (not a go-redis client).
var errNoScan = errors.New("this node cannot list its keys")

// scanAll scans every node at once and returns every Redis key found,
// whether a node's scan stopped at its cap (limit > 0) before the end, and
// an error for each node whose scan failed. The cap is five Redis keys per
// lock key asked for: a lock may have more beside it (its queue's two, a
// fence counter, readers, look numbers, and a list per waiting set), so a
// node may reach it with fewer than limit locks read, and the listing is
// then reported truncated.
func (c *Client) scanAll(ctx context.Context, match string, limit int) ([]string, bool, []error) {
	found := make([][]string, len(c.nodes))
	errs := make([]error, len(c.nodes))
	var capped atomic.Bool
	var g errgroup.Group
	for i, nd := range c.nodes {
		g.Go(func() error {
			s, ok := nd.(scanner)
			if !ok {
				errs[i] = fmt.Errorf("%s: %w", nd.Name(), errNoScan)
				return nil
			}
			keys, err := s.Scan(ctx, match, 5*limit, listScanTimeout)
			found[i] = keys
			if limit > 0 && len(keys) > 5*limit {
				capped.Store(true) // (Scan stops once it has more than its limit)
			}
			if err != nil {
				errs[i] = fmt.Errorf("%s: scan: %w", nd.Name(), err)
			}
			return nil
		})
	}
	_ = g.Wait()
	return slices.Concat(found...), capped.Load(), slices.DeleteFunc(errs, func(err error) bool { return err == nil })
}

// lockKeys turns Redis keys into the lock keys they belong to (a queue's,
// a fence counter's or a read-write lock's readers' into their lock's),
// sorted, without repeats, at most limit of them (0: all).
func (c *Client) lockKeys(redisKeys []string, limit int) (keys []string, truncated bool) {
	for _, k := range redisKeys {
		rest, ok := strings.CutPrefix(k, c.cfg.prefix+"{")
		if !ok {
			continue
		}
		if name, _, ok := strings.Cut(rest, "}"); ok && name != "" {
			keys = append(keys, name)
		}
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if limit > 0 && len(keys) > limit {
		return keys[:limit], true
	}
	return keys, false
}
