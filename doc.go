// Package redlock is a distributed lock over N independent Redis masters: the
// Redlock algorithm, with the corrections its popular implementations miss.
//
// # Guarantees
//
// An acquisition sends its acquire to all N nodes at once (a script, or
// for an uncontended mutex a plain SET NX) and succeeds only if a
// majority (N/2+1) granted it while the lock's validity was still
// positive. Validity is measured on this process's monotonic clock from
// before the first request was sent:
//
//	validity = TTL − elapsed − (TTL × drift factor + 2 ms)
//
// While validity lasts, no other client of this package can hold the same
// key, provided that
//   - the nodes are independent masters (not replicas of each other) and do
//     not lose a granted key early: a node that restarts without
//     persistence, or whose clock jumps forward, can break mutual exclusion
//     (the restart guard, on by default, covers restarts this Client sees);
//   - clocks on this machine and the nodes advance at rates that differ by
//     less than the drift factor (default 1%);
//   - this process does not pause for longer than the validity it has left
//     while it relies on the lock (a GC or VM pause can exceed it).
//
// Redlock alone gives no fencing token, so a holder that was paused past
// its validity cannot be detected by the resource it writes to.
// [WithFencing] adds one ([Lock.Fence]); see docs/fencing.md. Use
// [Lock.Validity] before acting, keep critical sections well inside the
// TTL, and read docs/design.md for the reasoning and its limits.
//
// A failed or cancelled attempt releases the lock on every node that
// granted it, including nodes whose grant arrives after the attempt ended
// (a node that never answers within the node timeout can keep the key until
// its TTL; see docs/design.md). Each node call is bounded by a per-node
// timeout that the library enforces itself, so a hung node costs neither
// Lock nor Unlock more than that timeout, and Lock returns as soon as a
// majority has granted. A node error that waiting cannot cure (a script the
// server cannot run, an ACL denial, a read-only replica, a key of another
// type) ends Lock's wait at once when it leaves no majority possible
// ([ErrUnusable]).
//
// # Words
//
// A holder acquires a lock with a token, a random secret, when a majority
// of nodes grant it. The lock stays valid for its validity, and ends when
// it is released (Unlock), when it expires (its validity ran out, or its
// key vanished from a node that granted it), or when it is taken over
// (another token holds the key on such a node). [Lock.Done] is closed when
// it ends, for whatever reason, and [Lock.Err] says which. Both look at the
// clock first, as does the context [Client.Do] gives the work: a process
// resumed after a pause past the lock's end sees the end at its first
// look. docs/design.md opens with this glossary.
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
// client (one vote) or a Sentinel failover client; docs/operations.md
// covers their caveats, persistence, the ACL rule a lock user needs, and
// TLS. For unit tests on miniredis, which has no run_id for the restart
// guard, pass [WithRestartGuard](0).
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
//	WithAutoExtend, watching lock.Done() …
//
// Waiting Locks are served in arrival order, across processes: a Lock
// refused once takes a place in the key's wait queue on every node, the
// nodes grant a free key only to the first waiter, and a release wakes only
// that waiter (an Unlock in the same Client, or a notice the nodes publish
// on its Client's channel); it looks at the queue on the retry strategy's
// timer too, and its place lapses if it stops refreshing it
// ([WithWaiterLease]). [Client.Close] releases what the Client still holds and stops its
// goroutines and subscriptions; call it at shutdown. [WithObserver] and
// [WithLogger] report every attempt, extension, release and early end; the
// module github.com/redlock-go/redlock/otel turns those events into
// OpenTelemetry metrics and spans.
//
// # Leader election
//
// [Client.Election] builds leader election on the lock, with the shape of
// etcd's: [Election.Campaign] waits until the caller leads and returns a
// [Leadership], whose term ([Leadership.Term]) is the lock's fencing token
// (strictly increasing from one leader to the next, never shared), whose
// Done channel is closed TTL/10 before it could expire, and which
// [Leadership.Resign] hands to the next candidate at once;
// [Leadership.Proclaim] changes the advertised value. [Election.Leader]
// reads the current leader, [Election.Observe] follows leaders in term
// order, and [Election.Lead] runs a function while leading, campaigning
// again after a loss with [WithRecampaign]. docs/election.md has an
// example service and says what a term protects.
//
// # Semaphore
//
// [Client.Semaphore] lets at most P holders in at once: P slots, each an
// ordinary lock, tried in a random order; a permit is a [*Lock], so Do,
// UnlockAfter, Extend, fencing and Inspect work as for any lock. Waiters
// wait in line in every slot's queue, and are served in order.
// docs/semaphore.md explains why counting holders per node would not do.
//
// # Multi-key locks
//
// [Client.MultiLock] locks several keys together, all or none: on each
// node one script sets every key or none, and the lock, a [*Lock] over the
// set, holds when a majority granted all of them. A set that waits takes
// one place in every key's wait queue: sets and one-key locks whose keys
// overlap are served in the order they came, and each key's release
// grants it to the set first in line, which holds once a majority of
// nodes have granted it every key. No holder holds a key while waiting
// for another, and a key granted to a waiting set is kept for it only
// while it is first in that key's line, so overlapping sets cannot
// deadlock. docs/multilock.md has the guarantees.
//
// # Read-write locks
//
// [Client.RWMutex] lets many readers in at once, or one writer. The
// writer is a lock on "rw:NAME" whose grant needs a majority of nodes with
// no live reader; each reader has its own token and lease, granted where
// no writer holds or waits ahead of it. Readers and writers wait in one
// queue, the readers ahead of a writer entering together, so neither side
// starves. docs/rwmutex.md has the guarantees.
//
// # Looking at the nodes
//
// [Client.Inspect] asks every node what it holds at one key: holder,
// metadata, TTL, fence, waiters. [Client.List] finds every lock whose name
// matches a glob, reading the nodes with SCAN, and inspects each; the
// redlock command's `redlock ls` prints it, a row per lock.
//
// Errors are matched with [errors.Is] against [ErrNotObtained],
// [ErrExpired], [ErrTakenOver], [ErrReleased], [ErrClosed],
// [ErrInvalidArgument], [ErrUnusable] and [ErrNoLeader]; a [*QuorumError] (see
// [errors.As]) tells which node answered what, with [ErrHeld] and
// [ErrNodeRestarted] among the nodes' reasons.
//
// All methods of [Client], [Lock], [Election], [Leadership], [Semaphore],
// [MultiLock] and [RWMutex] are safe for concurrent use.
package redlock
