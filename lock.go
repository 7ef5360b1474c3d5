package redlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// Lock is one acquisition of a lock: its holder's handle. It is safe for
// concurrent use: a watchdog may call Extend while another goroutine calls
// Unlock. Operations that talk to the nodes run one at a time.
type Lock struct {
	c        *Client
	target   // its key (or keys)
	token    string
	cfg      lockConfig // as acquired
	fence    int64      // fencing token, with WithFencing
	acquired time.Time  // when the winning attempt started

	turn   serial     // one Extend, Proclaim or Unlock at a time
	ext    *extender  // auto-extension, if any; set before the lock is shared
	ending sync.Mutex // held while the lock is being ended (see look)
	// A look's fast path (see look): the end point as a duration since
	// acquired, kept with until; and whether the lock has ended.
	endAfter atomic.Int64
	over     atomic.Bool

	mu       sync.Mutex // guards the fields below
	ttl      time.Duration
	until    time.Time
	released bool
	doneShut bool // done is closed (or, made later, will be made closed)
	// margin, while not 0, is the end margin of an auto-extended let-in in
	// place of TTL/10 (see endPoint, takeLetIn), until an extension; its
	// extender extends it once a tenth of its validity has passed.
	margin time.Duration
	// nodeBuf holds nodes when there are up to 5, in the Lock's own
	// allocation (it fits in the Lock's padding: 480 bytes either way).
	nodeBuf  [5]nodeRecord
	cooldown time.Duration // of the last Unlock
	nodes    []nodeRecord
	endErr   error         // why the lock ended: expired, taken over or released
	done     chan struct{} // made by Done or auto-extension; closed when the lock ends
	timer    *time.Timer   // without auto-extension: ends the lock when validity runs out
	runOut   error         // auto-extension: why the lock ends if its validity runs out now
}

// nodeRecord is what the lock knows of one node beyond the acquisition.
//
// A grant that arrives after Lock returned is one more node holding our
// lock, unless an Unlock's release reached that node first and found
// nothing: whichever of the two replies comes second sees both facts and
// releases the grant again. A node whose release was confirmed is not asked
// again by a retried Unlock (it would answer "no key").
type nodeRecord struct {
	granted bool // the node granted the lock, in time or late: our key was there
	late    bool // its grant arrived after Lock returned
	release uint8
}

// initNodes makes the lock's record of each of its Client's n nodes, in
// nodeBuf where they fit.
func (l *Lock) initNodes(n int) {
	if n <= len(l.nodeBuf) {
		l.nodes = l.nodeBuf[:n]
		return
	}
	l.nodes = make([]nodeRecord, n)
}

// nodeRecord.release
const (
	releaseNotAsked = iota
	releaseDone
	releaseMissed // the release found no key (or failed)
)

// Key returns the lock's key as given to Lock; for a lock on several keys
// ([Client.MultiLock]), the keys joined by spaces.
func (l *Lock) Key() string { return l.key }

// Keys returns the lock's keys: the one given to Lock, or those given to
// [Client.MultiLock].
func (l *Lock) Keys() []string { return l.given() }

// Token returns the lock's token: 130 random bits from crypto/rand (or the
// token given with [WithToken]); for a lock that a release granted to the
// waiting Lock, RLock or Semaphore.Acquire call (Event.LetIn), the call's
// place in the key's wait queue (the Client's random ID, ".wi", ".wif"
// with fencing, ".wim" or ".wifm" with metadata, ".wis" for a multi-key
// lock (".wism" with metadata), or ".ri", a number), which the nodes' queues showed while it
// waited. Pass it to WithToken to re-enter. Keep it secret: anyone with the token can release the lock.
func (l *Lock) Token() string { return l.token }

// Fence returns the lock's fencing token (see [WithFencing]), or 0 when the
// lock was acquired without fencing.
func (l *Lock) Fence() uint64 { return uint64(l.fence) }

// Validity returns how long the lock remains valid: 0 once it has expired,
// was released, or a failed Extend found it expired or taken over. It is a
// local, conservative estimate on this process's monotonic clock that
// already deducts drift. A lock that a release granted to a waiting Lock
// is valid at first for at most a waiter lease, until its extension to
// its TTL, sent in the background a little later, is back (see
// [Client.Lock]).
func (l *Lock) Validity() time.Duration {
	return max(time.Until(l.validUntil()), 0)
}

func (l *Lock) validUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// extender is the one goroutine of an auto-extended lock.
type extender struct {
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}
