package redlock

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
	"golang.org/x/sync/errgroup"
)

// Client acquires locks on a fixed set of independent Redis masters. Create
// it with [New], and [Client.Close] it when done: Close releases the locks
// it still holds and stops its goroutines. It is safe for concurrent use.
type Client struct {
	fleet // the nodes, and how a round is sent to them
	cfg   config
	hand  handoff       // waiters and release notices
	guard *restartGuard // nil when off
	// proposed is the last fence proposed (propose): proposals are ≡ 63
	// (mod 64) and grow.
	proposed atomic.Int64
	judge    func(int, wire.Result) wire.Result // guard.check, bound once; nil when off

	mu     sync.Mutex            // serialises Close
	held   [heldShards]heldShard // locks not yet released, for Close, by their key's hash
	seed   maphash.Seed          // for that hash
	closed chan struct{}         // closed by Close
}

// heldShards is how many shards a Client keeps its held locks in: every
// Lock and Unlock adds or removes one, and one mutex for all of them was
// the most contended of the cycle.
const heldShards = 16

// heldShard is one shard of a Client's held locks, padded to a cache line
// of its own.
type heldShard struct {
	mu    sync.Mutex
	locks map[*Lock]struct{}
	_     [48]byte
}

// shard is the shard of the Client's held locks that l belongs in.
func (c *Client) shard(l *Lock) *heldShard {
	return &c.held[maphash.String(c.seed, l.rkey)%heldShards]
}

// New returns a Client over clients, each one independent Redis master: a
// standalone client, a Sentinel failover client or a Cluster client (one
// vote however many shards). It rejects, with [ErrInvalidArgument], an
// empty list, a nil client, the same client or address twice, fewer than 3
// or an even number of clients unless [WithAnyNodeCount] is given, and
// options that apply only to one lock. It makes no call to the nodes.
//
// The Client does not own the clients: closing them is the caller's job.
func New(clients []redis.UniversalClient, opts ...Option) (*Client, error) {
	nodes := make([]node, len(clients))
	seen := make(map[any]int, len(clients))
	for i, cl := range clients {
		if cl == nil || isNilPointer(cl) {
			return nil, invalid("client %d is nil", i)
		}
		name, id := describe(i, cl)
		for _, k := range []any{cl, id} {
			if k == "" || !reflect.TypeOf(k).Comparable() {
				continue
			}
			if j, dup := seen[k]; dup {
				return nil, invalid("clients %d and %d are the same node (%s): nodes must be independent masters", j, i, name)
			}
			seen[k] = i
		}
		nodes[i] = nodeio.New(cl, name, i)
	}
	return newClient(nodes, opts)
}

// newClient applies and checks the options and the node count.
func newClient(nodes []node, opts []Option) (*Client, error) {
	cfg := defaultConfig()
	if err := applyClient(&cfg, opts); err != nil {
		return nil, err
	}
	if !canBeValid(cfg.lock.ttl, cfg.drift) {
		return nil, invalid("TTL %v leaves no validity after drift %v", cfg.lock.ttl, drift(cfg.lock.ttl, cfg.drift))
	}
	switch n := len(nodes); {
	case n == 0:
		return nil, invalid("no clients")
	case !cfg.anyCount && n < 3:
		return nil, invalid("%d clients: Redlock needs at least 3 to tolerate a failure (WithAnyNodeCount allows fewer)", n)
	case !cfg.anyCount && n%2 == 0:
		return nil, invalid("%d clients: an even count tolerates no more failures than %d (WithAnyNodeCount allows it)", n, n-1)
	case n >= wire.FenceModulus:
		return nil, invalid("%d clients: at most %d", n, wire.FenceModulus-1)
	}
	if !cfg.guardSet {
		cfg.guard = cfg.lock.ttl
	}
	c := &Client{cfg: cfg, seed: maphash.MakeSeed(), closed: make(chan struct{})}
	for i := range c.held {
		c.held[i].locks = make(map[*Lock]struct{})
	}
	c.fleet = fleet{nodes: nodes, timeout: cfg.nodeTimeout, timed: len(cfg.observers) > 0}
	c.hand.init(c)
	for _, n := range nodes {
		if rn, ok := n.(*nodeio.Node); ok {
			rn.Bind(c.closed, c.bg.Go, cfg.guard > 0)
		}
	}
	if cfg.guard > 0 {
		c.guard = newRestartGuard(cfg.guard, len(nodes))
		c.judge = c.guard.check
	}
	return c, nil
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// describe names a client for errors, and returns an identity for finding
// two clients of the same server ("" when it cannot tell).
func describe(i int, cl redis.UniversalClient) (name, id string) {
	switch cl := cl.(type) {
	case *redis.Client:
		if o := cl.Options(); o.Addr != "" && o.Addr != "FailoverClient" {
			return o.Addr, o.Network + "/" + o.Addr
		}
	case *redis.ClusterClient:
		if addrs := cl.Options().Addrs; len(addrs) > 0 {
			return "cluster " + strings.Join(addrs, ","), "cluster/" + strings.Join(addrs, ",")
		}
	}
	return fmt.Sprintf("node %d", i), ""
}

// redisKey maps a lock key to the Redis key that holds it.
func (c *Client) redisKey(key string) string { return c.cfg.prefix + "{" + key + "}" }

func (c *Client) checkOpen() error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
		return nil
	}
}

// track registers a new lock for Close, unless the Client is closed.
func (c *Client) track(l *Lock) error {
	sh := c.shard(l)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if err := c.checkOpen(); err != nil { // (Close closes first, then empties the shards)
		return err
	}
	sh.locks[l] = struct{}{}
	l.eachHeldKey(func(rkey string) { c.hand.acquired(rkey, l) })
	if l.cfg.autoExtend {
		l.startExtending()
	}
	return nil
}

// untrack forgets a lock that has ended.
func (c *Client) untrack(l *Lock) {
	sh := c.shard(l)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.locks, l)
}

// closeReleases bounds the releases Close runs at once: a Client holding
// thousands of locks does not start thousands of rounds together.
const closeReleases = 64

// Close releases every lock this Client still holds (stopping their
// auto-extension, and cancelling the context of work running under Do with
// cause [ErrClosed] first), stops the release-notice subscriptions, ends
// any Lock still waiting with ErrClosed, and waits for the Client's
// goroutines, as long as ctx allows. Later calls to Lock, TryLock, Do and
// Inspect return ErrClosed. Close does not close the go-redis clients,
// which belong to the caller. It returns the errors of releases that a
// majority did not confirm (those keys expire at their TTL); locks that had
// already expired or been taken over are not errors. A second Close returns
// nil.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.checkOpen() != nil {
		c.mu.Unlock()
		return nil
	}
	close(c.closed)
	c.mu.Unlock()
	var locks []*Lock
	for i := range c.held { // a track that saw the Client open has added its lock
		sh := &c.held[i]
		sh.mu.Lock()
		for l := range sh.locks {
			locks = append(locks, l)
		}
		sh.mu.Unlock()
	}

	// Releases are bounded by the node timeout, and run closeReleases at a
	// time; stopping subscriptions and the calls still running on
	// unresponsive nodes are bounded by go-redis's own timeouts, so those
	// are waited for only as long as ctx allows.
	errs := make([]error, len(locks))
	var g errgroup.Group
	g.SetLimit(closeReleases)
	for i, l := range locks {
		g.Go(func() error {
			// Work running under Do is told first: its lock is going away.
			if l.cfg.onEnd != nil {
				l.cfg.onEnd(ErrClosed)
			}
			// A lock already ended (expired, taken over, released) has
			// nothing left to release; only unconfirmed releases count.
			if err := l.Unlock(context.WithoutCancel(ctx)); errors.Is(err, ErrNotObtained) {
				errs[i] = err
			}
			return nil // every release is tried, and every failure reported
		})
	}
	_ = g.Wait()
	done := make(chan struct{})
	go func() {
		c.hand.close()
		c.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("redlock: close: calls to unresponsive nodes still running: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}

// callConfig validates key and opts, given to a call of scope s, and
// returns the call's lock settings.
func (c *Client) callConfig(key string, s scope, opts []Option) (lockConfig, error) {
	return c.configure(c.cfg.lock, key, s, opts)
}

// withOptions returns lc with opts applied. (Apart from configure: an
// option applies through a pointer, which would put configure's lc on the
// heap on every call, options or not.)
func withOptions(lc lockConfig, s scope, opts []Option) (lockConfig, error) {
	err := applyCall(&lc, s, opts)
	return lc, err
}

// configure is callConfig from the settings lc.
func (c *Client) configure(lc lockConfig, key string, s scope, opts []Option) (lockConfig, error) {
	if err := checkKey(key); err != nil {
		return lc, err
	}
	if len(opts) > 0 {
		var err error
		if lc, err = withOptions(lc, s, opts); err != nil {
			return lc, err
		}
	}
	if !canBeValid(lc.ttl, c.cfg.drift) {
		return lc, invalid("TTL %v leaves no validity after drift %v", lc.ttl, drift(lc.ttl, c.cfg.drift))
	}
	return lc, nil
}
