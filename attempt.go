package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// Lock acquires the lock on key, waiting as long as ctx allows.
//
// Waiters are served in order, across processes: after its first refused
// attempt, a Lock takes a place in the key's wait queue on every node
// (ordered by when it first tried), and while others wait a node grants a
// free key only to the first of them (or to the holder re-entering). A
// queued Lock tries again only when it is first: when a release of the key
// names it (a notice from a majority of nodes, or an Unlock in this
// Client), or when its look at the queue, which also refreshes its place
// (see [WithWaiterLease]), finds it first and the key free. The retry
// strategy paces those looks and the first waiter's retries; neither
// waits longer than the holder's remaining TTL, or than the first waiter's
// remaining lease when that waiter seems gone. A Lock that gives up leaves
// the queue, in the background: until that reaches the nodes, a TryLock
// elsewhere is still refused. A Lock of this Client that starts while the key is known to
// be contended queues before trying.
//
// It stops waiting at once when so many nodes fail for good that no
// majority is possible ([ErrUnusable]). On failure the error is a
// [*QuorumError] matching [ErrNotObtained], and ctx's error if ctx ended
// the wait, or [ErrClosed]. Options: WithTTL, WithRetry, WithMetadata,
// WithToken, WithAutoExtend, WithMaxHold, WithFencing.
//
// The first Lock that has to wait starts one subscription per node to the
// release notices, kept until [Client.Close].
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	lc, err := c.callConfig(key, toLock, opts)
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, c.target(key), &lc)
}

// TryLock makes exactly one attempt to acquire the lock on key. It does
// not take a place in the key's wait queue, and is refused ([ErrQueued] on
// the nodes) while others wait. On failure the error is a [*QuorumError]
// matching [ErrNotObtained]. It takes the options of Lock.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	lc, err := c.callConfig(key, toLock, opts)
	if err != nil {
		return nil, err
	}
	return c.tryLock(ctx, c.target(key), &lc)
}

// tryLock makes one attempt at t: TryLock's, and a multi-key or
// read-write lock's.
func (c *Client) tryLock(ctx context.Context, t target, lc *lockConfig) (*Lock, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	l, qerr := c.attempt(ctx, t, lc, 1, nil)
	if qerr != nil {
		return nil, qerr
	}
	return l, nil
}

// lockUnqueued waits for t without a place in a wait queue (a multi-key
// lock, a reader): attempts, paced by retrying.
func (c *Client) lockUnqueued(ctx context.Context, t target, lc *lockConfig) (*Lock, error) {
	return c.retrying(ctx, lc, func(n int) (*Lock, *QuorumError) { return c.attempt(ctx, t, lc, n, nil) })
}

// lock is Lock's loop. Each try is an attempt or, for a queued Lock that
// is not known to be first, a poll of the queue (which goes on to an
// attempt when it finds the Lock first and the key free); the retry
// strategy sees the number of failed tries and paces the next.
func (c *Client) lock(ctx context.Context, t target, lc *lockConfig) (*Lock, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	key, rkey := t.key, t.rkey
	var (
		w        *waiter // our place in the queue, once we have one
		tries    int     // failed tries: attempts and looks at the queue
		attempts int     // attempts made, for observers (Event.Attempt)
		last     failure // the last failed try
	)
	defer func() {
		if w != nil {
			c.hand.leave(rkey, w)
		}
	}()
	// giveUp leaves the queue (in the background) and returns the last
	// failure, with cause.
	giveUp := func(cause error) (*Lock, error) {
		if w != nil {
			c.leaveOn(ctx, c.nodes, &w.Place, rkey, lc.ttl)
		}
		return nil, last.err(c, key, ctx, cause)
	}
	attemptNext := true
	if c.hand.busy(rkey) {
		// Others wait for the key: queue first (unless the strategy says
		// not to wait at all).
		if _, ok := lc.retry(1); ok {
			w = c.hand.join(rkey)
			attemptNext = false
		}
	}
	for {
		var d time.Duration // the strategy's delay, once asked
		asked := false
		if !attemptNext {
			f := c.poll(ctx, lc, w)
			if f.fatal() {
				if f.cause != nil && last.valid() {
					return giveUp(f.cause) // the last attempt says more
				}
				last = f
				return giveUp(nil)
			}
			if attemptNext = f.r == nil; !attemptNext {
				tries++
				if cutShort(ctx, last, f) {
					return giveUp(ctx.Err())
				}
				last = f
			}
		}
		if attemptNext {
			attempts++
			l, e := c.attempt(ctx, t, lc, attempts, w)
			if e == nil {
				return l, nil
			}
			f := failure{qerr: e, hint: e.retryAfter}
			if cutShort(ctx, last, f) {
				return giveUp(ctx.Err())
			}
			last = f
			if e.cause != nil || e.unusable {
				return giveUp(nil)
			}
			tries++
			if w == nil {
				// Refused once: unless the strategy gives up, take a place
				// in the queue, and look at it.
				var ok bool
				if d, ok = lc.retry(tries); !ok {
					return nil, e
				}
				asked = true
				w = c.hand.join(rkey)
				f := c.poll(ctx, lc, w)
				if f.r == nil && f.cause == nil {
					continue // first, and the key free
				}
				if f.fatal() {
					if f.cause == nil {
						last = f
					}
					return giveUp(f.cause)
				}
				last.hint = sooner(last.hint, f.hint)
			}
		}
		if !asked {
			var ok bool
			if d, ok = lc.retry(tries); !ok {
				return giveUp(nil)
			}
		}
		if last.hint > 0 {
			d = min(d, last.hint)
		}
		d = min(d, w.Lease/3) // refresh our place in time
		woken, err := c.wait(ctx, w, d)
		if err != nil {
			return giveUp(err)
		}
		attemptNext = woken
	}
}

// cutShort reports whether try f, which failed after last, was ended by
// ctx before any node answered it (every node's error is a context's end:
// the caller's, or the node timeout's). A Lock that ends on such a try
// reports last instead, which says why the lock was not had (held
// elsewhere, say), with ctx's error.
func cutShort(ctx context.Context, last, f failure) bool {
	if ctx.Err() == nil || !last.valid() {
		return false
	}
	if f.qerr != nil { // an attempt: its agreeing nodes are counted, the others listed
		if f.qerr.Granted > 0 {
			return false
		}
		for _, n := range f.qerr.Nodes {
			if !ctxEnd(n.Err) {
				return false
			}
		}
		return true
	}
	for _, res := range f.r.results { // a look at the queue
		if !ctxEnd(res.Err) {
			return false
		}
	}
	return true
}

func ctxEnd(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// retrying runs try (given the attempt's number) until it succeeds, fails
// for good (ctx ended, or no majority possible) or the retry strategy
// gives up, sleeping between tries as the strategy says, never longer than
// the failure's retryAfter.
func (c *Client) retrying(ctx context.Context, lc *lockConfig, try func(n int) (*Lock, *QuorumError)) (*Lock, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	for n := 1; ; n++ {
		l, qerr := try(n)
		if qerr == nil {
			return l, nil
		}
		if qerr.cause != nil || qerr.unusable {
			return nil, qerr
		}
		d, ok := lc.retry(n)
		if !ok {
			return nil, qerr
		}
		if qerr.retryAfter > 0 {
			d = min(d, qerr.retryAfter)
		}
		if _, err := c.wait(ctx, nil, d); err != nil {
			qerr.cause = err // ctx's error, or ErrClosed
			return nil, qerr
		}
	}
}

// wait sleeps until w is woken (true), d has passed, ctx is done or the
// Client is closed, and returns ctx's error or ErrClosed in the last two
// cases. w may be nil: nothing wakes the sleep early.
func (c *Client) wait(ctx context.Context, w *waiter, d time.Duration) (bool, error) {
	var wake <-chan struct{}
	if w != nil {
		wake = w.wake
	}
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-wake:
		return true, nil
	case <-t.C:
	case <-ctx.Done():
		return false, ctx.Err()
	case <-c.closed:
		return false, ErrClosed
	}
	return false, nil
}

// failure is a failed try of a Lock: a refused attempt's error, or the
// round of a poll that did not find the Lock first with the key free (its
// error is built only if the Lock ends with it); and when to look again at
// the latest (hint, 0 if no bound).
type failure struct {
	qerr     *QuorumError
	r        *round // a poll's
	hint     time.Duration
	cause    error // a poll's context ended
	unusable string
}

func (f failure) valid() bool { return f.qerr != nil || f.r != nil }

// fatal reports whether a poll ends the Lock: its context ended, or no
// majority is possible.
func (f failure) fatal() bool { return f.cause != nil || f.unusable != "" }

// err is the error a Lock that ends after f returns, with cause if not nil.
func (f failure) err(c *Client, key string, ctx context.Context, cause error) *QuorumError {
	qerr := f.qerr
	switch {
	case qerr != nil:
	case f.r != nil:
		qerr = quorumError("lock", key, c.nodes, c.quorum(), f.r, 0, ctx)
		if f.unusable != "" && qerr.cause == nil {
			qerr.unusable, qerr.detail = true, f.unusable
		}
	default:
		qerr = &QuorumError{Op: "lock", key: key, Quorum: c.quorum(), err: ErrNotObtained}
	}
	if cause == nil {
		cause = f.cause
	}
	if cause != nil {
		qerr.cause = cause
	}
	return qerr
}

// poll joins w to the key's queue on every node, or refreshes its place,
// and tells whether w may attempt now: a zero failure when w is first on a
// majority of nodes that have the key free. A node that has w first and
// the key free counts for; any other answer against.
func (c *Client) poll(ctx context.Context, lc *lockConfig, w *waiter) failure {
	if err := ctx.Err(); err != nil {
		return failure{cause: err}
	}
	c.hand.awaitSubscribed(ctx, c.nodeTimeout(lc.ttl))
	o := &wire.Op{Kind: wire.OpQueue, Key: w.rkey, Place: &w.Place, Wake: c.hand.wakeArg}
	r := c.send(ctx, request{op: o, need: c.quorum(), timeout: c.nodeTimeout(lc.ttl), stop: tally.decided, judge: w.judge})
	r.finish(&c.bg, nil)
	if r.tally.won() {
		return failure{}
	}
	f := failure{r: r, unusable: c.unusable(r)}
	// First where the key is held: look again when the holder's keys are
	// gone at the latest. Free where another is first: when that waiter's
	// place lapses, should it be gone.
	for _, res := range r.results {
		var d time.Duration
		switch {
		case res.Status == wire.StatusHeld && res.Head == w.ID && res.PTTL >= 0:
			d = res.PTTL
		case res.Status == wire.StatusQueued:
			d = res.PTTL
		default:
			continue
		}
		d += time.Millisecond
		if f.hint == 0 || d < f.hint {
			f.hint = d
		}
	}
	return f
}

// leaveOn takes the place p out of rkey's queue on nodes, in the background.
func (c *Client) leaveOn(ctx context.Context, nodes []node, p *wire.Place, rkey string, ttl time.Duration) {
	if len(nodes) == 0 {
		return
	}
	o := &wire.Op{Kind: wire.OpQueue, Key: rkey, Place: p, Quiet: true, Wake: c.hand.wakeArg}
	c.send(context.WithoutCancel(ctx), request{op: o, nodes: nodes, need: len(nodes), timeout: c.nodeTimeout(ttl)}).finish(&c.bg, nil)
}

// acquisition is what one attempt's rounds found.
type acquisition struct {
	target
	token      string
	lc         *lockConfig
	place      *wire.Place // in the wait queue, if queued
	n          int         // the attempt's number within its Lock call
	r          *round      // the acquire round
	wr         *round      // the fence write-back round, with fencing
	fence      int64
	won        bool
	start, end time.Time
}

// attempt is one acquisition on every node.
// w is the caller's place in the key's wait queue, nil if it has none.
func (c *Client) attempt(ctx context.Context, t target, lc *lockConfig, n int, w *waiter) (*Lock, *QuorumError) {
	if err := ctx.Err(); err != nil {
		return nil, &QuorumError{Op: "lock", key: t.key, Quorum: c.quorum(), err: ErrNotObtained, cause: err}
	}
	a := &acquisition{target: t, token: lc.token, lc: lc, n: n}
	if a.token == "" {
		a.token = rand.Text()
	}
	if w != nil {
		a.place = &w.Place
	}
	c.acquire(ctx, a)
	if v := validity(lc.ttl, c.cfg.drift, a.start, a.end); a.won && v > 0 {
		return c.grant(ctx, a, v)
	}
	return nil, c.refuse(ctx, a)
}

// acquire sends the acquire script to every node and, with fencing, writes
// the token back to a majority.
func (c *Client) acquire(ctx context.Context, a *acquisition) {
	ttl := a.lc.ttl
	o := a.op(wire.OpAcquire, a.token, wire.EncodeValue(a.token, a.lc.meta), ttl)
	if a.lc.fencing && a.mode != wire.ModeRead { // readers get no fencing token
		o.Kind, o.Fence = wire.OpAcquireFenced, c.propose()
	}
	o.Place = a.place
	// Detached, as Unlock's releases are: a caller that cancels ctx as soon
	// as a majority granted (a wait with a timeout) would otherwise drop the
	// grants still queued for the slower nodes, and the lock would survive
	// one node fewer. Grants that come after a failed attempt are taken
	// back (refuse), as before.
	req := request{op: o, need: c.quorum(), timeout: c.nodeTimeout(ttl), stop: tally.decided, judge: c.judge, detach: true}
	a.start = time.Now()
	a.r = c.send(ctx, req)
	if mutated(mutValidityFromReply) {
		a.start = time.Now()
	}
	a.won = a.r.tally.won()
	if a.won && o.Kind == wire.OpAcquireFenced {
		// A majority that took our proposal holds it already: it is the
		// token. Otherwise the token is the largest a majority handed out;
		// written back to a majority, any later majority starts above it.
		// (docs/fencing.md has the argument.)
		acked := 0
		for _, res := range a.r.results {
			if res.OK() {
				a.fence = max(a.fence, res.Fence)
				if res.Fence == o.Fence {
					acked++
				}
			}
		}
		if acked >= c.quorum() {
			a.fence = o.Fence
		} else {
			a.wr = c.send(ctx, request{op: wire.NewFenceWrite(a.rkey, a.rkeys, a.token, a.fence), need: c.quorum(), timeout: c.nodeTimeout(ttl), stop: tally.decided})
			a.wr.finish(&c.bg, nil)
			a.won = a.wr.tally.won()
		}
	}
	a.end = time.Now()
}

// propose returns the fence this Client proposes for its next fenced
// acquisition: the time in 100 µs steps, times 64, plus 63 (a residue no
// node has), and above every proposal the Client made before; 0 (none) if
// that would come near 2^53. A node takes it only if it is above the
// node's counter, so a proposal that is too small costs the write-back
// round it would have saved, never safety; nor does one that is too large,
// which only makes later proposals from slower clocks fall short.
func (c *Client) propose() int64 {
	now := time.Now().UnixMicro()/100*wire.FenceModulus + wire.FenceModulus - 1
	for {
		last := c.proposed.Load()
		p := max(now, last+wire.FenceModulus)
		if p >= wire.MaxFence/2 {
			return 0
		}
		if c.proposed.CompareAndSwap(last, p) {
			return p
		}
	}
}

// grant makes the Lock of a won acquisition with validity v left.
func (c *Client) grant(ctx context.Context, a *acquisition, v time.Duration) (*Lock, *QuorumError) {
	ttl := a.lc.ttl
	l := &Lock{
		c: c, target: a.target, token: a.token, cfg: *a.lc, fence: a.fence,
		acquired: a.start, ttl: ttl, until: a.start.Add(ttl - drift(ttl, c.cfg.drift)),
		nodes: make([]nodeRecord, len(c.nodes)),
	}
	l.noteEnd()
	var refused []node // that keep our place in the queue
	for i, res := range a.r.results {
		// Guarded grants too: the key there is ours.
		l.nodes[i].granted = res.Status == wire.StatusOK || res.Status == wire.StatusRefreshed
		if a.place != nil && res.Answered && !l.nodes[i].granted {
			refused = append(refused, c.nodes[i])
		}
	}
	// A grant took our place out of the node's queue; elsewhere it goes now,
	// or when the node's late reply comes.
	c.leaveOn(ctx, refused, a.place, a.rkey, ttl)
	a.r.finish(&c.bg, func(i int, res wire.Result) {
		l.lateGrant(ctx, i, res)
		if a.place != nil && res.Status != wire.StatusOK && res.Status != wire.StatusRefreshed {
			c.leaveOn(ctx, []node{c.nodes[i]}, a.place, a.rkey, ttl)
		}
	})
	if c.observing() {
		c.emit(Event{Kind: EventAcquire, Context: ctx, Key: a.key, Attempt: a.n, Queued: a.place.Time(), Duration: a.end.Sub(a.start), Validity: v, Nodes: nodeResults(c.nodes, a.r)})
	}
	if err := c.track(l); err != nil {
		_ = l.Unlock(context.WithoutCancel(ctx))
		return nil, &QuorumError{Op: "lock", key: a.key, Quorum: c.quorum(), Granted: a.r.tally.ok, err: ErrNotObtained, cause: err}
	}
	return l, nil
}

// refuse takes back what a failed acquisition created, now and as late
// grants arrive, and describes the failure. Keys that already held our
// token stay as they were when the token was the caller's (re-entry); with
// a fresh token, "held already" can only be this attempt's own write, so
// it goes too.
func (c *Client) refuse(ctx context.Context, a *acquisition) *QuorumError {
	created := func(res wire.Result) bool {
		return res.Status == wire.StatusOK || res.Status == wire.StatusRefreshed && a.lc.token == ""
	}
	a.r.finish(&c.bg, func(i int, res wire.Result) {
		if created(res) {
			c.releaseOn(ctx, []node{c.nodes[i]}, a.target, a.token, a.lc.ttl, 0)
		}
	})
	var mine []node
	for i, res := range a.r.results {
		if created(res) {
			mine = append(mine, c.nodes[i])
		}
	}
	c.releaseOn(ctx, mine, a.target, a.token, a.lc.ttl, 0)
	qerr := quorumError("lock", a.key, c.nodes, c.quorum(), a.r, 0, ctx)
	switch {
	case a.wr != nil && !a.wr.tally.won():
		qerr = quorumError("lock", a.key, c.nodes, c.quorum(), a.wr, 0, ctx)
		qerr.detail = fmt.Sprintf("fencing token %d not written back to a majority", a.fence)
	case a.won:
		qerr.detail = "majority reached after the validity ran out"
	}
	if hint := c.unusable(a.r); hint != "" && qerr.cause == nil {
		qerr.unusable, qerr.detail = true, hint
	}
	qerr.retryAfter = retryHint(a.r, c.quorum(), a.end.Sub(a.start), a.rkeys != nil)
	if c.observing() {
		c.emit(Event{Kind: EventAcquire, Context: ctx, Key: a.key, Attempt: a.n, Queued: a.place.Time(), Duration: a.end.Sub(a.start), Err: qerr, Nodes: nodeResults(c.nodes, a.r)})
	}
	return qerr
}

// unusable returns, when so many nodes of round r failed for good that no
// majority is possible until something changes, what to change; else "".
func (c *Client) unusable(r *round) string {
	var hints []string
	failed := 0
	for _, res := range r.results {
		hint, ok := permanent(res.Err)
		if !ok {
			continue
		}
		failed++
		if !slices.Contains(hints, hint) {
			hints = append(hints, hint)
		}
	}
	if failed <= len(c.nodes)-c.quorum() {
		return ""
	}
	return fmt.Sprintf("%d of %d nodes cannot grant it until that changes: %s", failed, len(c.nodes), strings.Join(hints, "; "))
}

// releaseOn releases the key on the given nodes (leaving it for cooldown
// when not 0), with a context detached from the caller's cancellation and
// bounded by the node timeout, and without a release notice: it takes back
// grants that made no lock (a failed attempt's) or that an Unlock has
// already announced (late grants).
func (c *Client) releaseOn(ctx context.Context, nodes []node, t target, token string, ttl, cooldown time.Duration) {
	if len(nodes) == 0 {
		return
	}
	o := t.op(wire.OpRelease, token, "", cooldown)
	c.send(context.WithoutCancel(ctx), request{op: o, nodes: nodes, need: len(nodes), timeout: c.nodeTimeout(ttl)}).finish(&c.bg, nil)
}
