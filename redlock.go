// Package redlock is a distributed lock over N independent Redis masters: the
// Redlock algorithm, with the corrections its popular implementations miss.
//
// # Guarantees
//
// An acquisition sends the acquire script to all N nodes at once and succeeds
// only if a majority (N/2+1) granted it while the lock's validity was still
// positive. Validity is measured on this process's monotonic clock from
// before the first request was sent:
//
//	validity = TTL − elapsed − (TTL × DriftFactor + 2 ms)
//
// While validity lasts, no other client of this package can hold the same
// key, provided that
//   - the nodes are independent masters (not replicas of each other) and do
//     not lose a granted key early: a node that restarts without persistence,
//     or whose clock jumps forward, can break mutual exclusion;
//   - clocks on this machine and the nodes advance at rates that differ by
//     less than DriftFactor (default 1%);
//   - this process does not pause for longer than the validity it has left
//     while it relies on the lock (a GC or VM pause can exceed it).
//
// Redlock alone gives no fencing token, so a holder that was paused past its
// validity cannot be detected by the resource it writes to. [WithFencing]
// adds one ([Lock.Fence]); see docs/fencing.md. Use [Lock.Validity] before
// acting, keep critical sections well inside the TTL, and read
// docs/design.md for the reasoning and its limits.
//
// A failed or cancelled attempt releases the lock on every node that granted
// it, including nodes whose grant arrives after the attempt ended (a node
// that never answers within the node timeout can keep the key until its
// TTL; see docs/design.md). Each node
// call is bounded by a per-node timeout that the library enforces itself, so
// a hung node costs neither Lock nor Unlock more than that timeout, and Lock
// returns as soon as a majority has granted.
//
// # Node clients
//
// Each node is a go-redis client that the caller creates and closes. These
// settings suit lock nodes:
//
//	redis.NewClient(&redis.Options{
//		Addr:                  addr,
//		DialerRetries:         1,    // a dead node fails at once (default: 5 dials, 100 ms apart)
//		ContextTimeoutEnabled: true, // a hung node's call ends at the node timeout
//	})
//
// The library sends its scripts with go-redis's own retries turned off, so
// MaxRetries does not matter to it. A node may also be a Redis Cluster
// client (one vote) or a Sentinel failover client; docs/operations.md covers
// their caveats, persistence, the ACL rule a lock user needs, and TLS.
//
// # Usage
//
//	c, err := redlock.New([]redis.UniversalClient{n1, n2, n3})
//	defer c.Close(context.Background())
//
//	// Simplest: the lock is extended while fn runs, and fn's context is
//	// cancelled if the lock cannot be kept.
//	err = c.Do(ctx, "report:daily", func(ctx context.Context) error { … })
//
//	// Or by hand:
//	lock, err := c.Lock(ctx, "report:daily", redlock.WithTTL(30*time.Second))
//	if err != nil { … }
//	defer lock.Unlock(context.WithoutCancel(ctx))
//	… work, checking lock.Validity(), calling lock.Extend, or with
//	WithAutoExtend, watching lock.Lost() …
//
// A waiting [Client.Lock] does not only poll: it tries again as soon as the
// holder releases (an Unlock in the same Client, or a release notice
// published by the nodes), and waiters of one Client are served in arrival
// order. [Client.Close] releases what the Client still holds and stops its
// goroutines and subscriptions; call it at shutdown. [WithObserver] and
// [WithLogger] report every attempt, extension, loss and release; the
// module github.com/redlock-go/redlock/otel turns those events into
// OpenTelemetry metrics and spans.
//
// Errors are matched with [errors.Is] against [ErrNotObtained],
// [ErrLockExpired], [ErrLockLost], [ErrReleased], [ErrClosed] and
// [ErrInvalidArgument]; a [*QuorumError] (see [errors.As]) tells which node
// answered what, with [ErrNodeRestarted] for a node the restart guard
// discounted.
//
// All methods of [Client] and [Lock] are safe for concurrent use.
package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limits on arguments. Larger values are rejected with [ErrInvalidArgument].
const (
	MaxKeyLen      = 1024             // bytes in a lock key
	MaxMetadataLen = 4096             // bytes of holder metadata
	MaxTokenLen    = 256              // bytes in a token given to WithToken
	MinTTL         = time.Millisecond // and the TTL must also leave positive validity after drift
	MaxTTL         = 24 * time.Hour   // TTL of a lock, extension or cooldown
)

// Defaults.
const (
	DefaultTTL         = 10 * time.Second
	DefaultDriftFactor = 0.01
	DefaultKeyPrefix   = "redlock:"
	// DefaultNodeTimeoutDivisor: unless WithNodeTimeout is given, each node
	// call may take at most TTL/20 (500 ms for the default TTL).
	DefaultNodeTimeoutDivisor = 20
	// DefaultExtendDivisor: an auto-extended lock is extended every TTL/3
	// unless WithAutoExtend gives an interval.
	DefaultExtendDivisor = 3
	// LostMarginDivisor: an auto-extended lock that could not be extended is
	// declared lost when TTL/10 of validity is left, so that the work has
	// that long to stop before another client can take the lock.
	LostMarginDivisor = 10
	// DefaultMaxHold caps how long auto-extension keeps a lock.
	DefaultMaxHold = time.Hour
)

// Sentinel errors, for errors.Is.
var (
	// ErrNotObtained: the operation did not win a majority of nodes in time.
	// From Lock or TryLock the lock is not held; from Extend it was not
	// extended (it may still be valid, see Lock.Validity); from Unlock the
	// release was not confirmed by a majority (unconfirmed keys expire at
	// their TTL).
	ErrNotObtained = errors.New("redlock: not obtained")
	// ErrLockExpired: our lock had expired (on a node that had granted it
	// the key was gone) and no such node showed another holder.
	ErrLockExpired = errors.New("redlock: lock expired")
	// ErrLockLost: another token holds the key on a node that had granted
	// our lock: it was taken over. As a node's reason in a QuorumError it
	// means that node refused because another token held the key.
	ErrLockLost = errors.New("redlock: lock held by another token")
	// ErrReleased: Extend or Unlock was called on a lock already released.
	ErrReleased = errors.New("redlock: lock already released")
	// ErrInvalidArgument: a key, option or argument was rejected before any
	// node was contacted.
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrClosed: the Client was closed; it makes no more calls to the nodes.
	ErrClosed = errors.New("redlock: client closed")
)

// QuorumError is the error of an operation that did not win a majority. It
// matches its sentinel ([ErrNotObtained], [ErrLockExpired] or [ErrLockLost])
// with errors.Is, and also the caller's context error when the caller's
// context ended the operation. A single node's timeout or failure is listed
// in Nodes only, so errors.Is(err, context.DeadlineExceeded) is true only
// when the caller's own deadline passed.
type QuorumError struct {
	Op      string      // "lock", "extend" or "unlock"
	Key     string      // the lock key as the caller gave it
	Quorum  int         // nodes needed
	Granted int         // nodes that agreed
	Nodes   []NodeError // one per node that did not agree, in node order

	err    error  // sentinel
	cause  error  // the caller's context error (or ErrClosed), if any
	detail string // extra explanation, if any

	retryAfter time.Duration // lock: when the refusing holder's keys are gone at the latest; 0 unknown
}

// NodeError is one node's part in a failed operation.
type NodeError struct {
	Node string // the node's address, or "node N" for clients without one
	Err  error  // why it did not agree: ErrLockLost (held by another token), ErrLockExpired (key absent), or the node's own error
}

// Error is the node's name and its reason.
func (e *NodeError) Error() string {
	if e.Err == nil {
		return e.Node + ": ok"
	}
	return e.Node + ": " + e.Err.Error()
}

// Unwrap returns the node's own error.
func (e *NodeError) Unwrap() error { return e.Err }

// Error describes the operation, the reason, the count of agreeing nodes and
// each other node's answer.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %q: %s: ", e.Op, e.Key, strings.TrimPrefix(e.err.Error(), "redlock: "))
	if e.Granted+len(e.Nodes) == 0 {
		b.WriteString("no node asked")
	} else {
		fmt.Fprintf(&b, "%d of %d nodes agreed, %d needed", e.Granted, e.Granted+len(e.Nodes), e.Quorum)
	}
	if e.detail != "" {
		b.WriteString(" (" + e.detail + ")")
	}
	if e.cause != nil {
		b.WriteString(": " + e.cause.Error())
	}
	for i := range e.Nodes {
		b.WriteString("; " + e.Nodes[i].Error())
	}
	return b.String()
}

// Unwrap returns the sentinel and, when the caller's context ended the
// operation, the context's error.
func (e *QuorumError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.err, e.cause}
	}
	return []error{e.err}
}

// errUndecided is the reason of a node that had not answered when the
// outcome was already decided; its reply is handled when it comes.
var errUndecided = errors.New("no reply yet when the outcome was decided")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

// config is a Client's settings.
type config struct {
	lock        lockConfig // defaults for every lock
	drift       float64
	nodeTimeout time.Duration // 0: TTL / DefaultNodeTimeoutDivisor
	prefix      string
	anyCount    bool
	observers   []Observer
	guard       time.Duration // restart guard period; 0 off
	guardSet    bool
}

// lockConfig is one lock's settings.
type lockConfig struct {
	ttl        time.Duration
	retry      RetryStrategy
	meta       string
	token      string
	autoExtend bool
	every      time.Duration // auto-extension interval; 0: ttl / DefaultExtendDivisor
	maxHold    time.Duration
	fencing    bool
	onLost     func(error) // Do: cancels fn's context
	err        error
}

func (c *lockConfig) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// Option configures a Client. Options are created by the With… functions.
type Option interface{ apply(*config) }

// LockOption configures one call to Lock or TryLock.
type LockOption interface{ applyLock(*lockConfig) }

// SharedOption is an option that, given to [New], sets the default for every
// lock of the Client and, given to Lock or TryLock, applies to that lock only.
type SharedOption interface {
	Option
	LockOption
}

type clientOption func(*config)

func (f clientOption) apply(c *config) { f(c) }

type lockOnlyOption func(*lockConfig)

func (f lockOnlyOption) applyLock(c *lockConfig) { f(c) }

type sharedOption func(*lockConfig)

func (f sharedOption) applyLock(c *lockConfig) { f(c) }
func (f sharedOption) apply(c *config)         { f(&c.lock) }

// WithTTL sets how long a lock lives on the nodes unless extended. It must be
// at least [MinTTL], at most [MaxTTL], and long enough to leave positive
// validity after drift. The default is [DefaultTTL] (10 s).
func WithTTL(ttl time.Duration) SharedOption {
	return sharedOption(func(c *lockConfig) {
		if err := checkDuration("TTL", ttl); err != nil {
			c.fail(err)
			return
		}
		c.ttl = ttl
	})
}

// WithRetry sets how Lock retries after a failed attempt. The default waits a
// random delay in [10 ms, 200 ms) between attempts until the context ends
// (see [RandomBackoff]). TryLock never retries.
func WithRetry(s RetryStrategy) SharedOption {
	return sharedOption(func(c *lockConfig) {
		if s == nil {
			c.fail(invalid("nil retry strategy"))
			return
		}
		c.retry = s
	})
}

// WithMetadata stores information about the holder (host, pid, job id…) with
// the lock on every node, for [Client.Inspect] and [Lock.Metadata]. At most
// [MaxMetadataLen] bytes. The default is none.
func WithMetadata(m string) SharedOption {
	return sharedOption(func(c *lockConfig) {
		if len(m) > MaxMetadataLen {
			c.fail(invalid("metadata is %d bytes, more than %d", len(m), MaxMetadataLen))
			return
		}
		c.meta = m
	})
}

// WithToken acquires with the given token instead of a fresh random one. A
// holder that passes its own [Lock.Token] re-enters its lock: nodes that hold
// that token grant again and refresh the TTL. Re-entry is not counted: one
// Unlock releases the key. A failed re-entry leaves the holder's lock as it
// was. The token must be 1 to [MaxTokenLen] bytes without NUL. Keep tokens
// secret and unguessable: anyone with the token can release the lock.
func WithToken(token string) LockOption {
	return lockOnlyOption(func(c *lockConfig) {
		switch {
		case token == "":
			c.fail(invalid("empty token"))
		case len(token) > MaxTokenLen:
			c.fail(invalid("token is %d bytes, more than %d", len(token), MaxTokenLen))
		case strings.IndexByte(token, 0) >= 0:
			c.fail(invalid("token contains a NUL byte"))
		default:
			c.token = token
		}
	})
}

// WithAutoExtend keeps the lock alive while it is held: one goroutine per
// lock extends it on every node every interval (0 means TTL/3), until Unlock
// stops it or [WithMaxHold] is reached. If extension cannot keep a majority,
// the lock is declared lost when TTL/10 of validity is left: [Lock.Lost] is
// closed and [Lock.Err] says why. Failed extensions are reported to
// observers. [Client.Do] always auto-extends. The default is no
// auto-extension.
func WithAutoExtend(interval time.Duration) SharedOption {
	return sharedOption(func(c *lockConfig) {
		if interval < 0 {
			c.fail(invalid("auto-extend interval %v is negative", interval))
			return
		}
		c.autoExtend, c.every = true, interval
	})
}

// WithMaxHold caps how long auto-extension keeps a lock, counted from its
// acquisition: the last extension ends the lock at that time, and it is then
// declared lost like any lock that can no longer be extended. A caller
// calling [Lock.Extend] itself is not capped. It must be within
// [[MinTTL], 30 days]. The default is [DefaultMaxHold] (1 hour).
func WithMaxHold(d time.Duration) SharedOption {
	return sharedOption(func(c *lockConfig) {
		if d < MinTTL || d > 30*24*time.Hour {
			c.fail(invalid("max hold %v outside [%v, 720h]", d, MinTTL))
			return
		}
		c.maxHold = d
	})
}

// WithFencing hands out a fencing token with each acquisition
// ([Lock.Fence]): a number that grows with every holder, so that a resource
// can refuse writes from a holder whose lock has passed to another (a holder
// paused past its validity, say). Each node keeps a counter per key (no
// TTL); the token is the largest a majority handed out, written back to a
// majority before the lock is returned. That costs one more round trip, and
// it is counted against the validity. A holder whose acquisition returned
// before another's began has the smaller token; tokens stay below 2^53 and
// are never shared, even by holders that overlap because timing assumptions
// failed. All clients of a key must list the nodes in the same order (a
// node's position is part of its tokens), and the counters must be
// persisted (see docs/fencing.md). The default is no fencing.
func WithFencing() SharedOption {
	return sharedOption(func(c *lockConfig) { c.fencing = true })
}

// WithRestartGuard enforces the Redlock spec's "delayed restart" rule in the
// client: when a node this Client knows comes back as a new process (its
// run_id changed: a restart, or a failover to another server), its grants do
// not count towards a majority for period. A node that restarted without
// persistence has forgotten the locks it granted; until they would have
// expired it could grant them again to someone else. Set period to the
// longest TTL any client uses. 0 turns the guard off, for nodes that lose
// nothing on restart (appendonly with appendfsync always). The default is
// on, with the Client's default TTL as the period.
//
// The guard costs each acquire an INFO call on the node, and a restart that
// happens before this Client first hears from the node goes unnoticed. A
// Redis Cluster node is not guarded (its shards have run_ids of their own).
func WithRestartGuard(period time.Duration) Option {
	return clientOption(func(c *config) {
		if period < 0 || period > MaxTTL {
			c.lock.fail(invalid("restart guard period %v outside [0, %v]", period, MaxTTL))
			return
		}
		c.guard, c.guardSet = period, true
	})
}

// WithDriftFactor sets the fraction of the TTL set aside for clock-rate
// differences between this process and the nodes; 2 ms are always added.
// It must be in [0, 1). The default is [DefaultDriftFactor] (0.01).
func WithDriftFactor(f float64) Option {
	return clientOption(func(c *config) {
		if !(f >= 0 && f < 1) {
			c.lock.fail(invalid("drift factor %v outside [0, 1)", f))
			return
		}
		c.drift = f
	})
}

// WithNodeTimeout bounds every call to one node. The library enforces it
// itself, even for go-redis clients without ContextTimeoutEnabled (which
// otherwise ignore context deadlines while reading). It should be small
// against the TTL: a node slower than this counts as failed. The default is
// TTL/20 of the lock concerned (500 ms for the default TTL).
func WithNodeTimeout(d time.Duration) Option {
	return clientOption(func(c *config) {
		if d <= 0 {
			c.lock.fail(invalid("node timeout %v is not positive", d))
			return
		}
		c.nodeTimeout = d
	})
}

// WithKeyPrefix sets the prefix of the Redis keys: the lock "job" is stored
// at prefix+"{job}", so everything belonging to one lock shares a Cluster
// hash slot. The prefix must not contain braces. The default is
// [DefaultKeyPrefix] ("redlock:").
func WithKeyPrefix(p string) Option {
	return clientOption(func(c *config) {
		if strings.ContainsAny(p, "{}") || len(p) > MaxKeyLen {
			c.lock.fail(invalid("key prefix %q contains braces or is too long", p))
			return
		}
		c.prefix = p
	})
}

// WithAnyNodeCount lets New accept fewer than 3 nodes or an even number of
// them. With 1 or 2 nodes a single node failure makes locking impossible, and
// an even count tolerates no more failures than one node fewer.
func WithAnyNodeCount() Option {
	return clientOption(func(c *config) { c.anyCount = true })
}

func checkDuration(what string, d time.Duration) error {
	switch {
	case d < MinTTL:
		return invalid("%s %v is less than %v", what, d, MinTTL)
	case d > MaxTTL:
		return invalid("%s %v is more than %v", what, d, MaxTTL)
	}
	return nil
}

// Client acquires locks on a fixed set of independent Redis masters. Create
// it with [New], and [Client.Close] it when done: Close releases the locks
// it still holds and stops its goroutines. It is safe for concurrent use.
type Client struct {
	nodes []node
	cfg   config
	bg    sync.WaitGroup // goroutines waiting for late replies
	work  *workers       // goroutines that make the node calls
	hand  handoff        // waiters and release notices
	guard *restartGuard  // nil when off

	mu     sync.Mutex
	held   map[*Lock]struct{} // locks not yet released, for Close
	closed chan struct{}      // closed by Close
}

// New returns a Client over clients, each one independent Redis master: a
// standalone client, a Sentinel failover client or a Cluster client (one
// vote however many shards). It rejects, with [ErrInvalidArgument], an empty
// list, a nil client, the same client or address twice, and fewer than 3 or
// an even number of clients unless [WithAnyNodeCount] is given.
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
		nodes[i] = &redisNode{client: cl, addr: name, index: i}
	}
	return newClient(nodes, opts)
}

// newClient applies and checks the options and the node count.
func newClient(nodes []node, opts []Option) (*Client, error) {
	cfg := config{
		lock:   lockConfig{ttl: DefaultTTL, retry: defaultRetry, maxHold: DefaultMaxHold},
		drift:  DefaultDriftFactor,
		prefix: DefaultKeyPrefix,
	}
	for _, o := range opts {
		if o == nil {
			return nil, invalid("nil option")
		}
		o.apply(&cfg)
	}
	if cfg.lock.err != nil {
		return nil, cfg.lock.err
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
	case n > fenceModulus:
		return nil, invalid("%d clients: at most %d", n, fenceModulus)
	}
	if !cfg.guardSet {
		cfg.guard = cfg.lock.ttl
	}
	c := &Client{cfg: cfg, nodes: nodes, held: make(map[*Lock]struct{}), closed: make(chan struct{})}
	c.work = newWorkers(c.closed)
	c.hand.init(c)
	if cfg.guard > 0 {
		multi := make([]bool, len(nodes))
		for i, n := range nodes {
			if rn, ok := n.(*redisNode); ok {
				_, multi[i] = rn.client.(*redis.ClusterClient)
			}
		}
		c.guard = newRestartGuard(cfg.guard, multi)
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

// Quorum returns the number of nodes that make a majority.
func (c *Client) Quorum() int { return quorum(len(c.nodes)) }

// Nodes returns the names of the nodes, in the order they were given.
func (c *Client) Nodes() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.name()
	}
	return names
}

// redisKey maps a lock key to the Redis key that holds it.
func (c *Client) redisKey(key string) string { return c.cfg.prefix + "{" + key + "}" }

func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return ttl / DefaultNodeTimeoutDivisor
}

func checkKey(key string) error {
	switch {
	case key == "":
		return invalid("empty key")
	case len(key) > MaxKeyLen:
		return invalid("key is %d bytes, more than %d", len(key), MaxKeyLen)
	}
	return nil
}

// lockConfig validates key and opts and returns the lock's settings.
func (c *Client) lockConfig(key string, opts []LockOption) (lockConfig, error) {
	lc := c.cfg.lock
	if err := checkKey(key); err != nil {
		return lc, err
	}
	for _, o := range opts {
		if o == nil {
			return lc, invalid("nil lock option")
		}
		o.applyLock(&lc)
	}
	if lc.err != nil {
		return lc, lc.err
	}
	if !canBeValid(lc.ttl, c.cfg.drift) {
		return lc, invalid("TTL %v leaves no validity after drift %v", lc.ttl, drift(lc.ttl, c.cfg.drift))
	}
	return lc, nil
}

// Lock acquires the lock on key, waiting as long as ctx allows. After a
// failed attempt it tries again as soon as a release of the key is announced,
// by a notice from a node or by an Unlock in this Client, or else when the
// retry strategy's delay has passed (never later than the holder's
// remaining TTL). Lock calls of one Client waiting for the same key are
// served in arrival order. On failure the error is a [*QuorumError] matching
// [ErrNotObtained], and ctx's error if ctx ended the wait, or [ErrClosed].
//
// The first Lock that has to wait starts one subscription per node to the
// release notices, kept until [Client.Close].
func (c *Client) Lock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, key, &lc)
}

func (c *Client) lock(ctx context.Context, key string, lc *lockConfig) (*Lock, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	rkey := c.redisKey(key)
	var w *waiter
	defer func() {
		if w != nil {
			c.hand.leave(rkey, w)
		}
	}()
	if c.hand.busy(rkey) {
		// Others of this Client already wait for the key: queue behind them
		// (unless the strategy says not to wait at all).
		if d, ok := lc.retry.Delay(1); ok {
			w = c.hand.join(rkey)
			if err := c.wait(ctx, w, d); err != nil {
				return nil, &QuorumError{Op: "lock", Key: key, Quorum: c.Quorum(), err: ErrNotObtained, cause: err}
			}
		}
	}
	for failed := 1; ; failed++ {
		l, qerr := c.attempt(ctx, key, rkey, lc, failed)
		if qerr == nil {
			return l, nil
		}
		if qerr.cause != nil {
			return nil, qerr
		}
		d, ok := lc.retry.Delay(failed)
		if !ok {
			return nil, qerr
		}
		if qerr.retryAfter > 0 {
			d = min(d, qerr.retryAfter)
		}
		if w == nil {
			w = c.hand.join(rkey)
		}
		if err := c.wait(ctx, w, d); err != nil {
			qerr.cause = err
			return nil, qerr
		}
	}
}

// TryLock makes exactly one attempt to acquire the lock on key. On failure
// the error is a [*QuorumError] matching [ErrNotObtained].
func (c *Client) TryLock(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	l, qerr := c.attempt(ctx, key, c.redisKey(key), &lc, 1)
	if qerr != nil {
		return nil, qerr
	}
	return l, nil
}

func (c *Client) checkOpen() error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
		return nil
	}
}

// wait sleeps until w is woken, d has passed, ctx is done or the Client is
// closed, and returns ctx's error or ErrClosed in the last two cases.
func (c *Client) wait(ctx context.Context, w *waiter, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-w.wake:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closed:
		return ErrClosed
	}
	return nil
}

// attempt is one acquisition round on every node; n counts the attempts of
// the Lock call it belongs to.
func (c *Client) attempt(ctx context.Context, key, rkey string, lc *lockConfig, n int) (*Lock, *QuorumError) {
	if err := ctx.Err(); err != nil {
		return nil, &QuorumError{Op: "lock", Key: key, Quorum: c.Quorum(), err: ErrNotObtained, cause: err}
	}
	token := lc.token
	if token == "" {
		token = rand.Text()
	}
	ttl, kind := lc.ttl, opAcquire
	if lc.fencing {
		kind = opAcquireFenced
	}
	o := newOp(kind, rkey, token, encodeValue(token, lc.meta), ttl).withGuard(c.guard)
	start := time.Now()
	r := fanOut(ctx, c.work, c.nodes, c.Quorum(), c.nodeTimeout(ttl), o, tally.decided, c.observing())
	won, fence, wr := r.tally.won(), int64(0), (*round)(nil)
	if won && lc.fencing {
		// The token is the largest a majority handed out; written back to
		// a majority, any later majority starts above it.
		for _, res := range r.results {
			if res.ok() {
				fence = max(fence, res.fence)
			}
		}
		wr = fanOut(ctx, c.work, c.nodes, c.Quorum(), c.nodeTimeout(ttl), newFenceWrite(rkey, fence), tally.decided, false)
		wr.finish(&c.bg, nil)
		won = wr.tally.won()
	}
	end := time.Now()
	if v := validity(ttl, c.cfg.drift, start, end); won && v > 0 {
		l := &Lock{
			c: c, key: key, rkey: rkey, token: token, meta: lc.meta, cfg: *lc, fence: fence,
			acquired: start, ttl: ttl, until: start.Add(ttl - drift(ttl, c.cfg.drift)),
			nodes: make([]nodeState, len(c.nodes)),
		}
		for i, res := range r.results {
			if !res.answered {
				l.nodes[i].acquire = latePending
			}
			// Guarded grants too: the key there is ours.
			l.nodes[i].granted = res.status == statusOK || res.status == statusRefreshed
		}
		r.finish(&c.bg, func(i int, res result) { l.lateGrant(ctx, i, res) })
		if c.observing() {
			c.emit(Event{Kind: EventAcquired, Context: ctx, Key: key, Attempt: n, Duration: end.Sub(start), Validity: v, Nodes: nodeEvents(c.nodes, r)})
		}
		if err := c.track(l); err != nil {
			_ = l.Unlock(context.WithoutCancel(ctx))
			return nil, &QuorumError{Op: "lock", Key: key, Quorum: c.Quorum(), Granted: r.tally.ok, err: ErrNotObtained, cause: err}
		}
		return l, nil
	}
	// Failed: take back what this attempt created, now, and as late grants
	// arrive. Keys that already held our token stay as they were when the
	// token was the caller's (re-entry); with a fresh token, "held already"
	// can only be this attempt's own write, so it goes too.
	created := func(res result) bool {
		return res.status == statusOK || res.status == statusRefreshed && lc.token == ""
	}
	r.finish(&c.bg, func(i int, res result) {
		if created(res) {
			c.releaseOn(ctx, []node{c.nodes[i]}, rkey, token, ttl, 0)
		}
	})
	var mine []node
	for i, res := range r.results {
		if created(res) {
			mine = append(mine, c.nodes[i])
		}
	}
	c.releaseOn(ctx, mine, rkey, token, ttl, 0)
	qerr := c.quorumError("lock", key, c.nodes, r, 0, ctx)
	switch {
	case wr != nil && !wr.tally.won():
		qerr = c.quorumError("lock", key, c.nodes, wr, 0, ctx)
		qerr.detail = fmt.Sprintf("fencing token %d not written back to a majority", fence)
	case won:
		qerr.detail = "majority reached after the validity ran out"
	}
	qerr.retryAfter = c.retryAfter(r, end.Sub(start))
	if c.observing() {
		c.emit(Event{Kind: EventRefused, Context: ctx, Key: key, Attempt: n, Duration: end.Sub(start), Err: qerr, Nodes: nodeEvents(c.nodes, r)})
	}
	return nil, qerr
}

// retryAfter bounds the wait after a failed attempt that took round. If one
// token refused on a majority of nodes, it holds the lock, whose keys are
// gone at the latest when its longest PTTL runs out (no bound if a key has
// no TTL). If no token holds a majority while a majority of nodes answered,
// nobody holds the lock: a split vote between contenders, or keys on their
// way out. Then waiting for a release notice would wait for nothing, so the
// answer is a random delay of up to two rounds, which parts the contenders.
// With too many nodes failing there is no bound: the retry strategy decides.
func (c *Client) retryAfter(r *round, round time.Duration) time.Duration {
	type holder struct {
		token string
		n     int
		pttl  time.Duration // longest
		noTTL bool          // some key of it has no TTL
	}
	var holders []holder
	answered := 0
	for _, res := range r.results {
		switch {
		case res.guarded: // a restarted node's grant: as good as no answer
		case res.status == statusOK, res.status == statusRefreshed, res.status == statusAbsent:
			answered++
		case res.status == statusHeld:
			answered++
			i := slices.IndexFunc(holders, func(h holder) bool { return h.token == res.value })
			if i < 0 {
				holders, i = append(holders, holder{token: res.value}), len(holders)
			}
			h := &holders[i]
			h.n++
			h.pttl, h.noTTL = max(h.pttl, res.pttl), h.noTTL || res.pttl < 0
		}
	}
	for _, h := range holders {
		if h.n >= c.Quorum() {
			if h.noTTL {
				return 0
			}
			return h.pttl + time.Millisecond
		}
	}
	if answered >= c.Quorum() {
		return jitter(time.Microsecond, 2*round+time.Microsecond)
	}
	return 0
}

// track registers a new lock for Close, unless the Client is closed.
func (c *Client) track(l *Lock) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkOpen(); err != nil {
		return err
	}
	c.held[l] = struct{}{}
	c.hand.acquired(l.rkey, l.token)
	if l.cfg.autoExtend {
		l.startExtending()
	}
	return nil
}

// untrack forgets a lock that is released or lost.
func (c *Client) untrack(l *Lock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.held, l)
}

// releaseOn releases the key on the given nodes, with a context detached from
// the caller's cancellation and bounded by the node timeout, and without a
// release notice: it takes back grants that made no lock (a failed
// attempt's) or that an Unlock has already announced (late grants).
func (c *Client) releaseOn(ctx context.Context, nodes []node, rkey, token string, ttl, cooldown time.Duration) {
	if len(nodes) == 0 {
		return
	}
	o := newOp(opRelease, rkey, token, "", cooldown).quiet()
	fanOut(context.WithoutCancel(ctx), c.work, nodes, len(nodes), c.nodeTimeout(ttl), o, nil, false).finish(&c.bg, nil)
}

// quorumError describes a failed round over nodes, with already agreements
// from earlier rounds, as ErrNotObtained; Extend and Unlock then tell from
// the nodes' answers whether the lock has ended (see Lock.endedBy).
func (c *Client) quorumError(op, key string, nodes []node, r *round, already int, ctx context.Context) *QuorumError {
	e := &QuorumError{Op: op, Key: key, Quorum: c.Quorum(), Granted: r.tally.ok + already, err: ErrNotObtained, cause: ctx.Err()}
	for i, res := range r.results {
		var err error
		switch {
		case res.guarded:
			err = ErrNodeRestarted
		case res.status == statusOK, res.status == statusRefreshed:
			continue
		case res.status == statusHeld:
			err = ErrLockLost
		case res.status == statusAbsent:
			err = ErrLockExpired
		default:
			err = res.err
			if res.undecided() {
				err = errUndecided
			}
		}
		e.Nodes = append(e.Nodes, NodeError{Node: nodes[i].name(), Err: err})
	}
	return e
}
