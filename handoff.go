package redlock

import (
	"context"
	"crypto/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// handoff is the Client's side of the wait queues (the nodes' side is in
// internal/wire/queue.go). A Lock refused once takes a place in the key's
// queue on every node: an ID and a ticket, chosen once, so that every node
// orders the same waiters the same way; it refreshes its place while it
// waits, and tries again only when it is first (see Client.lockQueued). A node
// grants a free key only to the first waiter, so the queue spans every
// process that locks the key, and this Client's waiters are ordered by it
// like any others: tickets of one Client strictly increase.
//
// Releases wake only the first waiter. The release script publishes the
// key, the released token and the first waiter's ID on the channel of that
// waiter's Client (prefix + "wake:" + the Client's ID), to which each
// Client with waiters subscribes on every node, from its first waiter
// until Close; an Unlock in this Client reads the same ID from the nodes'
// replies. A waiter is woken when a majority of nodes have announced the
// same release, by the ID most of those that reached this Client named.
// Notices can be lost (a subscription reconnecting, a node down); every
// waiter also polls the queue on a timer, which refreshes its place too.
type handoff struct {
	c       *Client
	id      string // this Client's: the first part of its waiters' IDs
	wakeArg any    // the wake channels' prefix, boxed once for the scripts
	mu      sync.Mutex
	queues  map[string]*waitQueue // by Redis key
	// live is len(queues), kept under mu and read without it: with no
	// queue at all (no waiter of this Client, no contended key lately) an
	// uncontended Lock and Unlock skip the four visits they make here.
	live    atomic.Int32
	started bool // subscription started (or Client closed)
	stops   []func()
	ready   chan struct{} // closed once a majority of nodes confirmed the subscription
	nready  atomic.Int32
	last    int64 // the last ticket issued
	seq     int   // waiters made
	// Per node (letin.go): how many times its subscription was confirmed
	// (a confirmation after the first is a reconnect: maybe a restart);
	// and the count it had when a look sent after that confirmation
	// brought back the node's run_id (see countsFrom).
	confirms  []atomic.Uint64
	heard     []atomic.Uint64
	abandoned map[string]time.Time // let-in waiters that ended without the lock, to when
}

type waitQueue struct {
	h            *handoff
	rkey         string
	waiters      map[string]*waiter  // this Client's, by ID
	holder       *Lock               // this Client's lock on the key, until its release
	lastReleased string              // token of this Client's last release of the key
	lastWoken    string              // the waiter that release woke here, if any
	notices      map[string][]string // per released token, the waiter each notice of its release named
	noticed      []string            // the tokens in notices, oldest first (at most keptReleases)
	// contended: until then, Lock calls of this Client queue at once
	// instead of trying first: the key's last release that this Client
	// saw found others waiting.
	contended time.Time
}

// waiter is one waiting Lock call.
type waiter struct {
	wire.Place
	t    target        // what it waits for: its place is in each of its keys' queues
	wake chan struct{} // buffered: a wake is kept until the waiter looks
	// cut, a set's (buffered): a wake to attempt also ends the set's look
	// in flight, if any (see pollQueue); nil for other waiters
	cut   chan struct{}
	judge func(int, wire.Result) wire.Result // counts a poll's reply for, if w is first and the key free
	free  int                                // nodes its last look found it first on, with the key free
	// splits: looks in a row that found the key held by no token on a
	// majority (see pollQueue)
	splits int
	// heard: the nodes its looks have heard from, but for any that missed
	// a look's deadline since (bit i: node i; see heardFrom), which its
	// next look waits for at most (see lookRequest). Late answers add to
	// it from the nodes' goroutines (heardLate).
	heard atomic.Uint64
	// nextHere: its last look found only waiters of this Client ahead of
	// it, on a majority of nodes (see claim)
	nextHere atomic.Bool
	// grantSeen: how long its last look took, if it found the key (a
	// set's: a key) granted to its place (or it let in) on some node,
	// whose notice is then on its way (see waitLoop.awaitGrants and
	// checkGrants); 0 otherwise. Its wait loop's.
	grantSeen time.Duration
	// grantsHeld: that look found it so on a majority of nodes
	grantsHeld bool
	// grantsFrom: the nodes (bit i: node i) that look found each key
	// granted to it on, in w.keys' order; their notices are due (see
	// handoff.settled). Its wait loop's.
	grantsFrom []uint64
	// checkOnly: its next look was called by lookShort, to see whether
	// its grants are stuck; if they are not, it waits on for their
	// notices rather than attempt (see Client.pollQueue). Its wait loop's.
	checkOnly   bool
	grantChecks int // such looks in a row (see checkGrants)
	// lookRTT: how long its last look took (ns), which bounds how
	// far behind one another a release's notices come (see lookShort)
	lookRTT atomic.Int64

	// Guarded by the handoff's mu (notice.go, handover.go):
	asleep      *lockConfig          // its Lock call's, while it sleeps between tries
	handed      *handedAttempt       // an attempt an Unlock sent for it while it slept
	woke        string               // the key whose release last woke it
	readersLeft int                  // a writer's: nodes that said their last reader left, since its last attempt
	blocked     map[string]bool      // a set's: the keys its last look found it waiting for, but those released to it since, each to whether it was split
	mustLook    bool                 // woken to look: a set's while blocked was not empty, or granted on a minority (see lookSoon, lookShort)
	soon        *time.Timer          // wakes it to look, or a set to attempt (see lookSoon, lookShort, attemptSoon)
	soonDue     bool                 // soon's wake is still due
	shortLook   bool                 // soon's look is for grants on a minority only (see lookShort)
	freed       map[string]time.Time // a set's: when each key's release last reached it
	admission                        // a reader's admissions by writers' releases (letin.go)
}

// judgeReply is a poll's judge: for if w is first and the key free,
// otherwise against (the key held, or another waiter first).
func (w *waiter) judgeReply(_ int, r wire.Result) wire.Result {
	if r.Head == wire.LetIn { // let in: the reader attempts, if its notices did not hold
		r.Status = wire.StatusOK
		return r
	}
	if r.Status == wire.StatusAbsent { // the key is free
		r.Status = wire.StatusQueued
		if r.Head == w.ID {
			r.Status = wire.StatusOK
		}
	}
	return r
}

func (h *handoff) init(c *Client) {
	h.c = c
	h.id = rand.Text()[:13] // 65 random bits
	h.wakeArg = c.cfg.prefix + wakeInfix
	h.queues = make(map[string]*waitQueue)
	h.ready = make(chan struct{})
	h.confirms = make([]atomic.Uint64, len(c.nodes))
	h.heard = make([]atomic.Uint64, len(c.nodes))
}

// subscribed is called each time node i confirms the subscription (by a
// fake node, inside watch: it takes no lock). A confirmation after the
// first is a reconnect, which a restart of the node also causes: see
// countsFrom.
func (h *handoff) subscribed(i int) {
	if h.confirms[i].Add(1) > 1 {
		return
	}
	if int(h.nready.Add(1)) == h.c.quorum() {
		close(h.ready)
	}
}

// awaitSubscribed waits until a majority of nodes have confirmed the
// subscription, so that a release that names one of this Client's waiters
// from now on reaches it, or until d has passed or ctx is done. Only the
// Client's first waiters wait: one round trip.
func (h *handoff) awaitSubscribed(ctx context.Context, d time.Duration) {
	select {
	case <-h.ready:
		return
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.ready:
	case <-t.C:
	case <-ctx.Done():
	case <-h.c.closed:
	}
}

// wakeInfix follows the key prefix in the name of a Client's wake channel
// (releaseSrc's short form derives it from the key: wire.WakeInfix).
const wakeInfix = wire.WakeInfix

// busy reports whether Lock calls for t should queue before trying:
// others of this Client wait for one of its keys, or the key's last
// release found a queue.
func (h *handoff) busy(t target) bool {
	if h.live.Load() == 0 {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	busy := false
	t.eachQueueKey(func(rkey string) { busy = busy || h.queues[rkey].busy() })
	return busy
}

// busy reports whether q (nil: no queue) has this Client's waiters, or
// its last release found a queue; callers hold the handoff's mu.
func (q *waitQueue) busy() bool {
	return q != nil && (len(q.waiters) > 0 || time.Now().Before(q.contended))
}

// join registers a new waiter for t, with a ticket above every ticket
// this Client issued before, and starts the subscriptions on first use.
// A reader with a token of its own (WithToken) is not let in: it would
// hold by its place's ID; nor is a writer granted the key but as
// grantable says.
func (h *handoff) join(t target, lc *lockConfig) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		h.started = true
		channel := h.c.cfg.prefix + wakeInfix + h.id
		for i, n := range h.c.nodes {
			h.stops = append(h.stops, n.Watch(channel, func(_, p string) { h.notice(i, p) }, func() { h.subscribed(i) }))
		}
	}
	h.last = max(time.Now().UnixMicro(), h.last+1)
	h.seq++
	id := h.id + "." + strconv.Itoa(h.seq)
	letIn := t.mode == wire.ModeRead && lc.token == ""
	granted := grantable(t, lc)
	switch {
	case letIn: // the scripts tell readers, and those a release may let in, by it (see wire's queueLua)
		id = h.id + ".ri" + strconv.Itoa(h.seq)
	case granted && t.multiKey() && lc.meta != "": // a set with metadata, which its looks keep for the grants
		id = h.id + ".wism" + strconv.Itoa(h.seq)
	case granted && t.multiKey(): // a set: a release grants its other keys too, where they are free for it (wire's grantRest)
		id = h.id + ".wis" + strconv.Itoa(h.seq)
	case granted && t.mode == wire.ModeElection: // a candidate: granted with its value, announced (wire's releaseSrc)
		id = h.id + ".wie" + strconv.Itoa(h.seq)
	case granted && lc.meta != "" && lc.fencing: // with metadata, which its looks keep for the grant (wire's queueSrc), and fenced
		id = h.id + ".wifm" + strconv.Itoa(h.seq)
	case granted && lc.meta != "": // with metadata, which its looks keep for the grant
		id = h.id + ".wim" + strconv.Itoa(h.seq)
	case granted && lc.fencing: // a fenced waiter: holds by grants that name its fencing token (wire's releaseSrc)
		id = h.id + ".wif" + strconv.Itoa(h.seq)
	case granted: // and the writers a release may grant the key (letin.go)
		id = h.id + ".wi" + strconv.Itoa(h.seq)
	case t.mode == wire.ModeRead:
		id = h.id + ".r" + strconv.Itoa(h.seq)
	}
	w := &waiter{Place: wire.Place{ID: id, Ticket: h.last, Lease: h.c.cfg.lease}, t: t, wake: make(chan struct{}, 1)}
	if letIn || granted {
		w.sends = map[int64]time.Time{}
		w.keys = make([]admits, max(len(t.slots), len(t.rkeys), 1))
		for k := range w.keys {
			w.keys[k].from = make([]time.Time, len(h.c.nodes))
			if granted && lc.fencing {
				w.keys[k].fences = make([]int64, len(h.c.nodes))
			}
		}
	}
	w.judge = w.judgeReply
	if t.multiKey() {
		w.cut = make(chan struct{}, 1)
	}
	t.eachQueueKey(func(rkey string) { h.queue(rkey).waiters[w.ID] = w })
	return w
}

// queue returns rkey's queue, made if need be; callers hold h.mu.
func (h *handoff) queue(rkey string) *waitQueue {
	q := h.queues[rkey]
	if q == nil {
		q = &waitQueue{h: h, rkey: rkey, waiters: map[string]*waiter{}}
		h.queues[rkey] = q
		h.live.Store(int32(len(h.queues)))
	}
	return q
}

// leave unregisters w, whose Lock call holds held (nil: nothing); a
// waiter let in, or granted the key, where it does not hold by its
// place's ID has the ID released there (see abandon).
func (h *handoff) leave(w *waiter, held *Lock) {
	h.mu.Lock()
	if w.soon != nil {
		w.soon.Stop()
	}
	w.t.eachQueueKey(func(rkey string) {
		if q := h.queues[rkey]; q != nil {
			delete(q.waiters, w.ID)
			h.forget(rkey, q)
		}
	})
	nodes := h.abandon(w, held)
	h.mu.Unlock()
	if nodes == nil {
		return
	}
	k := 0
	w.t.eachQueueKey(func(rkey string) {
		h.releaseLetIn(rkey, w.ID, nodes[k])
		k++
	})
}

// forget drops rkey's queue when nothing in it matters any more; callers
// hold h.mu.
func (h *handoff) forget(rkey string, q *waitQueue) {
	if len(q.waiters) == 0 && q.holder == nil && !time.Now().Before(q.contended) {
		delete(h.queues, rkey)
		h.live.Store(int32(len(h.queues)))
	}
}

// acquired records that this Client now holds rkey with l: releases of
// other tokens announced while l is live are old news.
func (h *handoff) acquired(rkey string, l *Lock) {
	if h.live.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[rkey]; q != nil {
		q.holder = l
	}
}

// close stops the subscriptions and waits for them.
func (h *handoff) close() {
	h.mu.Lock()
	stops := h.stops
	h.stops, h.started = nil, true
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, stop := range stops {
		wg.Go(stop)
	}
	wg.Wait()
}
