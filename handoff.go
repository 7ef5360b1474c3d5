package redlock

import (
	"context"
	"crypto/rand"
	"strconv"
	"strings"
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
	started bool                  // subscription started (or Client closed)
	stops   []func()
	ready   chan struct{} // closed once a majority of nodes confirmed the subscription
	nready  atomic.Int32
	last    int64 // the last ticket issued
	seq     int   // waiters made
}

type waitQueue struct {
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
	t     target                             // what it waits for: its place is in each of its keys' queues
	wake  chan struct{}                      // buffered: a wake is kept until the waiter looks
	judge func(int, wire.Result) wire.Result // counts a poll's reply for, if w is first and the key free
	free  int                                // nodes its last look found it first on, with the key free
	// splits: looks in a row that found the key held by no token on a
	// majority (see pollQueue)
	splits int
}

// judgeReply is a poll's judge: for if w is first and the key free,
// otherwise against (the key held, or another waiter first).
func (w *waiter) judgeReply(_ int, r wire.Result) wire.Result {
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
}

// subscribed is called once per node that confirmed the subscription
// (by a fake node, inside watch: it takes no lock).
func (h *handoff) subscribed() {
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

// wakeInfix follows the key prefix in the name of a Client's wake channel.
const wakeInfix = "wake:"

// busy reports whether Lock calls for t should queue before trying:
// others of this Client wait for one of its keys, or the key's last
// release found a queue.
func (h *handoff) busy(t target) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	busy := false
	t.eachQueueKey(func(rkey string) {
		if q := h.queues[rkey]; q != nil && (len(q.waiters) > 0 || time.Now().Before(q.contended)) {
			busy = true
		}
	})
	return busy
}

// join registers a new waiter for t, with a ticket above every ticket
// this Client issued before, and starts the subscriptions on first use.
func (h *handoff) join(t target) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		h.started = true
		channel := h.c.cfg.prefix + wakeInfix + h.id
		for _, n := range h.c.nodes {
			h.stops = append(h.stops, n.Watch(channel, h.notice, h.subscribed))
		}
	}
	h.last = max(time.Now().UnixMicro(), h.last+1)
	h.seq++
	id := h.id + "." + strconv.Itoa(h.seq)
	if t.mode == wire.ModeRead {
		id = h.id + ".r" + strconv.Itoa(h.seq) // the scripts tell readers by it (see wire's queueLua)
	}
	w := &waiter{Place: wire.Place{ID: id, Ticket: h.last, Lease: h.c.cfg.lease}, t: t, wake: make(chan struct{}, 1)}
	w.judge = w.judgeReply
	t.eachQueueKey(func(rkey string) { h.queue(rkey).waiters[w.ID] = w })
	return w
}

// queue returns rkey's queue, made if need be; callers hold h.mu.
func (h *handoff) queue(rkey string) *waitQueue {
	q := h.queues[rkey]
	if q == nil {
		q = &waitQueue{waiters: map[string]*waiter{}}
		h.queues[rkey] = q
	}
	return q
}

// leave unregisters w.
func (h *handoff) leave(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.t.eachQueueKey(func(rkey string) {
		if q := h.queues[rkey]; q != nil {
			delete(q.waiters, w.ID)
			h.forget(rkey, q)
		}
	})
}

// forget drops rkey's queue when nothing in it matters any more; callers
// hold h.mu.
func (h *handoff) forget(rkey string, q *waitQueue) {
	if len(q.waiters) == 0 && q.holder == nil && !time.Now().Before(q.contended) {
		delete(h.queues, rkey)
	}
}

// acquired records that this Client now holds rkey with l: releases of
// other tokens announced while l is live are old news.
func (h *handoff) acquired(rkey string, l *Lock) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[rkey]; q != nil {
		q.holder = l
	}
}

// released handles this Client's release of rkey: heads are the first
// waiters the nodes that answered named (none: no queue). The waiter a
// majority of nodes named is woken if it is this Client's; a waiter named
// by fewer may be first only where the new holder's attempt came in ahead
// of this release, and would attempt in vain.
func (h *handoff) released(rkey, token string, heads []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil {
		if len(heads) == 0 {
			return
		}
		q = h.queue(rkey)
	}
	if q.holder != nil && q.holder.token == token {
		q.holder = nil
	}
	q.lastReleased = token
	q.lastWoken = q.wakeNamed(heads, h.c.quorum(), h.c.cfg.lease)
	h.forget(rkey, q)
}

// notice handles a wake-up published by a node: the key, the released
// token and the first waiter's ID, NUL-separated. When a majority of nodes
// have announced the release of the same token to this Client, the lock
// can be had: the waiter a majority of them named is woken. Waking at the first
// notice would send the attempt while most nodes still hold the key; a
// competitor releasing a partial grant publishes nothing.
func (h *handoff) notice(_, payload string) {
	// Tokens and IDs hold no NUL; a key might.
	j := strings.LastIndexByte(payload, 0)
	if j < 0 {
		return
	}
	i := strings.LastIndexByte(payload[:j], 0)
	if i < 0 {
		return
	}
	rkey, token, head := payload[:i], payload[i+1:j], payload[j+1:]
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil || q.holder != nil && q.holder.live() && q.holder.token != token || token == q.lastReleased && head == q.lastWoken {
		// Nobody waits, we hold it, or our own release's first waiter,
		// woken by Unlock (its other notices name the readers after the
		// first, and may come before Unlock has returned).
		// A lock of ours that ended unreleased (expired while its holder
		// worked on, or was paused) holds nothing: others may have held
		// the key since, and their releases are news.
		return
	}
	if token == wire.ReadersLeft {
		// The last reader of a read-write lock left one node. Each node's
		// last reader may be another, so no token gathers a majority:
		// each such notice wakes the waiter named (an attempt that finds
		// readers left on a majority costs one refused round).
		q.wakeNamed([]string{head}, 1, h.c.cfg.lease)
		return
	}
	named, seen := q.notices[token]
	if !seen {
		q.remember(token)
	}
	named = append(named, head)
	q.notices[token] = named
	if count(named, head) == h.c.quorum() { // once: this notice made the majority
		// A writer's release names every reader at the front, each in a
		// notice of its own: wake the one this notice names.
		q.contended = time.Now().Add(h.c.cfg.lease)
		q.wake(q.waiters[head])
	}
}

// keptReleases bounds the releases a queue keeps the notices of: a
// release's notices come within a round trip of each other, while 64 other
// releases of the key take many.
const keptReleases = 64

// remember makes room for the notices of the release of token, forgetting
// the oldest release's once keptReleases are kept. (Forgetting them all at
// once would lose the first notices of a release still coming in: its
// waiter, never woken, would sleep until its next look.)
func (q *waitQueue) remember(token string) {
	if q.notices == nil {
		q.notices = make(map[string][]string)
	}
	if len(q.noticed) == keptReleases {
		delete(q.notices, q.noticed[0])
		q.noticed = append(q.noticed[:0], q.noticed[1:]...)
	}
	q.noticed = append(q.noticed, token)
}

// wakeNamed wakes this Client's waiter that at least quorum of heads name,
// if any; with no head named at all, the first of this Client's waiters
// (one that has not joined the nodes' queues yet). It notes whether others
// wait, and returns the ID of the waiter it woke ("" if none).
func (q *waitQueue) wakeNamed(heads []string, quorum int, lease time.Duration) string {
	var w *waiter
	if len(heads) > 0 {
		q.contended = time.Now().Add(lease)
		w = q.waiters[namedBy(heads, quorum)]
	} else {
		q.contended = time.Time{}
		for _, x := range q.waiters {
			if w == nil || x.Ticket < w.Ticket {
				w = x
			}
		}
	}
	q.wake(w)
	if w == nil {
		return ""
	}
	return w.ID
}

// wake wakes w, if not nil; a wake is kept until w looks.
func (q *waitQueue) wake(w *waiter) {
	if w != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// namedBy returns the ID that at least quorum of ids name, "" if none.
func namedBy(ids []string, quorum int) string {
	for _, id := range ids {
		if count(ids, id) >= quorum {
			return id
		}
	}
	return ""
}

// count returns how many of ids are id.
func count(ids []string, id string) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
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
