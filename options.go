package redlock

import (
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// WithTTL sets how long a lock lives on the nodes unless extended: at least
// 1 ms, at most 24 h, and long enough to leave positive validity after
// drift. The default is 10 s. It applies to New (the default for every
// lock), to Lock, TryLock and Do, and to Client.Election (a leadership's
// TTL: a dead leader is replaced about this long after its last
// extension).
func WithTTL(ttl time.Duration) Option {
	return lockOption("WithTTL", toClient|toLock|toElection, func(c *lockConfig) error {
		if err := checkDuration("TTL", ttl); err != nil {
			return err
		}
		c.ttl = ttl
		return nil
	})
}

// WithRetry sets how Lock retries after a failed attempt. The default waits
// a random delay in [10 ms, 200 ms) between attempts until the context ends
// (see RandomBackoff). TryLock never retries. It applies to New, Lock and
// Do, and to Client.Election, whose candidates otherwise only look at the
// queue to refresh their place (every waiter lease/3) and when the
// leader's keys run out.
func WithRetry(s RetryStrategy) Option {
	return lockOption("WithRetry", toClient|toLock|toElection, func(c *lockConfig) error {
		if s == nil {
			return invalid("nil retry strategy")
		}
		c.retry = s
		return nil
	})
}

// WithMetadata stores information about the holder (host, pid, job id…)
// with the lock on every node, for Inspect. At most 4 KiB, not starting
// with the byte 0x02 (the nodes' mark of a key with waiters). The default
// is none. It applies to New, Lock, TryLock and Do.
func WithMetadata(m string) Option {
	return lockOption("WithMetadata", toClient|toLock, func(c *lockConfig) error {
		if len(m) > maxMetadataLen {
			return invalid("metadata is %d bytes, more than %d", len(m), maxMetadataLen)
		}
		if strings.HasPrefix(m, wire.Queued[1:]) { // it would read as the mark after the token's NUL
			return invalid("metadata starts with the byte 0x02, which marks a lock key whose wait queue has had places")
		}
		c.meta = m
		return nil
	})
}

// WithToken acquires with the given token instead of a fresh random one. A
// holder that passes its own [Lock.Token] re-enters its lock: nodes that
// hold that token grant again and refresh the TTL. Re-entry is not counted:
// one Unlock releases the key. A failed re-entry leaves the holder's lock
// as it was. Given to Inspect, it shows the token on the nodes where it
// holds the key (Inspect shows no token otherwise). The token must be 1 to
// 256 bytes without NUL. Keep tokens secret: anyone with the token can
// release the lock. It applies to Lock, TryLock, Do and Inspect.
func WithToken(token string) Option {
	return lockOption("WithToken", toLock|toInspect, func(c *lockConfig) error {
		switch {
		case token == "":
			return invalid("empty token")
		case len(token) > maxTokenLen:
			return invalid("token is %d bytes, more than %d", len(token), maxTokenLen)
		case strings.IndexByte(token, 0) >= 0:
			return invalid("token contains a NUL byte")
		}
		c.token = token
		return nil
	})
}

// WithAutoExtend keeps the lock alive while it is held: one goroutine per
// lock extends it on every node every interval (0 means TTL/3), until
// Unlock stops it or WithMaxHold is reached. If extension cannot keep a
// majority, the lock ends with TTL/10 of validity left (a lock the
// holder's release granted, until its first extension, which comes at
// once: a tenth of the validity it was granted with): [Lock.Done] is
// closed and [Lock.Err] says why. Failed extensions are reported to
// observers. [Client.Do] always auto-extends. The default is no
// auto-extension. It applies to New, Lock, TryLock and Do, and to
// Client.Election (a leadership always auto-extends; this sets the
// interval).
func WithAutoExtend(interval time.Duration) Option {
	return lockOption("WithAutoExtend", toClient|toLock|toElection, func(c *lockConfig) error {
		if interval < 0 {
			return invalid("auto-extend interval %v is negative", interval)
		}
		c.autoExtend, c.every = true, interval
		return nil
	})
}

// WithMaxHold caps how long auto-extension (and so [Client.Do]) keeps a
// lock, counted from its acquisition: the last extension ends the lock at
// that time, and it then ends as expired, like any lock that can no longer
// be extended; under Do, the work's context is cancelled. A caller calling
// [Lock.Extend] itself is not capped. It must be within [1 ms, 30 days].
// The default is 1 hour. It applies to New, Lock, TryLock and Do.
func WithMaxHold(d time.Duration) Option {
	return lockOption("WithMaxHold", toClient|toLock, func(c *lockConfig) error {
		if d < minTTL || d > maxMaxHold {
			return invalid("max hold %v outside [%v, %v]", d, minTTL, maxMaxHold)
		}
		c.maxHold = d
		return nil
	})
}

// WithFencing hands out a fencing token with each acquisition
// ([Lock.Fence]): a number that grows with every holder, so that a resource
// can refuse writes from a holder whose lock has passed to another (a
// holder paused past its validity, say). Each node keeps a counter per key
// (no TTL). The Client proposes a token with the acquire; when a majority
// takes it (on an uncontended key, as a rule), that is the token, at no
// extra cost. Otherwise the token is the largest a majority handed out,
// written back to a majority before the lock is returned: one more round
// trip, counted against the validity. A Lock waiting behind a fenced
// holder of a one-key mutex (or a read-write lock's writer behind a
// writer) is handed the key by that holder's release, with the token the
// release proposed, once a majority granted it so. A holder whose acquisition
// returned before another's began has the smaller token; tokens stay below
// 2^53 and are never shared, even by holders that overlap because timing
// assumptions failed. All clients of a key must list the nodes in the same
// order (a node's position is part of its tokens), and the counters must
// be persisted (see docs/fencing.md). The default is no fencing. It
// applies to New, Lock, TryLock and Do.
func WithFencing() Option {
	return lockOption("WithFencing", toClient|toLock, func(c *lockConfig) error {
		c.fencing = true
		return nil
	})
}

// WithRestartGuard enforces the Redlock spec's "delayed restart" rule in
// the client: when a node this Client knows comes back as a new process
// (its run_id changed: a restart, or a failover to another server), its
// grants do not count towards a majority for period. A node that restarted
// without persistence has forgotten the locks it granted; until they would
// have expired it could grant them again to someone else. Set period to
// the longest TTL any client uses. 0 turns the guard off, for nodes that
// lose nothing on restart (appendonly with appendfsync always) and for
// test servers. The default is on, with the Client's default TTL as the
// period. It applies to New.
//
// The guard asks each node INFO server once per connection, before the
// first acquire sent on it (a restart closes every connection). A server
// that cannot answer it with a run_id (an ACL user without +info,
// miniredis) fails the acquisition at once with ErrUnusable, naming this
// option. A restart that happens before this Client first hears from the
// node goes unnoticed, so does one hidden by a proxy that keeps the
// client's connection open, and a Redis Cluster node is not guarded (its
// shards have run_ids of their own).
func WithRestartGuard(period time.Duration) Option {
	return clientOption("WithRestartGuard", func(c *config) error {
		if period < 0 || period > maxTTL {
			return invalid("restart guard period %v outside [0, %v]", period, maxTTL)
		}
		c.guard, c.guardSet = period, true
		return nil
	})
}

// WithWaiterLease sets how long a waiting Lock's place in a key's wait
// queue lasts on a node without a refresh. A Lock that was refused once
// queues for the key on every node, in the order of its first attempt, and
// refreshes its place every lease/3 while it waits (see [Client.Lock]); a
// waiter that dies or is paused for longer than the lease loses its place,
// so it holds up the waiters behind it for at most one lease. It must be
// in [10 ms, 1 h]; the default is 1 s. It applies to New.
func WithWaiterLease(d time.Duration) Option {
	return clientOption("WithWaiterLease", func(c *config) error {
		if d < minWaiterLease || d > maxWaiterLease {
			return invalid("waiter lease %v outside [%v, %v]", d, minWaiterLease, maxWaiterLease)
		}
		c.lease = d
		return nil
	})
}

// WithDriftFactor sets the fraction of the TTL set aside for clock-rate
// differences between this process and the nodes; 2 ms are always added.
// It must be in [0, 1). The default is 0.01. It applies to New.
func WithDriftFactor(f float64) Option {
	return clientOption("WithDriftFactor", func(c *config) error {
		if !(f >= 0 && f < 1) {
			return invalid("drift factor %v outside [0, 1)", f)
		}
		c.drift = f
		return nil
	})
}

// WithNodeTimeout bounds every call to one node. The library enforces it
// itself, even for go-redis clients without ContextTimeoutEnabled (which
// otherwise ignore context deadlines while reading). It should be small
// against the TTL: a node slower than this counts as failed. The default
// is TTL/20 of the lock concerned (500 ms for the default TTL). It applies
// to New.
func WithNodeTimeout(d time.Duration) Option {
	return clientOption("WithNodeTimeout", func(c *config) error {
		if d <= 0 {
			return invalid("node timeout %v is not positive", d)
		}
		c.nodeTimeout = d
		return nil
	})
}

// WithKeyPrefix sets the prefix of the Redis keys: the lock "job" is stored
// at prefix+"{job}", so everything belonging to one lock shares a Cluster
// hash slot. The prefix must not contain braces. The default is
// "redlock:". It applies to New.
func WithKeyPrefix(p string) Option {
	return clientOption("WithKeyPrefix", func(c *config) error {
		if strings.ContainsAny(p, "{}") || len(p) > maxKeyLen {
			return invalid("key prefix %q contains braces or is too long", p)
		}
		c.prefix = p
		return nil
	})
}

// WithAnyNodeCount lets New accept fewer than 3 nodes or an even number of
// them. With 1 or 2 nodes a single node failure makes locking impossible,
// and an even count tolerates no more failures than one node fewer. It
// applies to New.
func WithAnyNodeCount() Option {
	return clientOption("WithAnyNodeCount", func(c *config) error {
		c.anyCount = true
		return nil
	})
}
