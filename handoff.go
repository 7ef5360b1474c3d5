package redlock

import (
	"crypto/rand"
	"strings"
	"sync"
	"time"
)

// handoff is the Client's side of the wait queues (the nodes' side is in
// script.go: queueLua). A Lock refused once takes a place in the key's
// queue on every node: an ID and a ticket, chosen once, so that every node
// orders the same waiters the same way; it refreshes its place while it
// waits, and tries again only when it is first (see Client.lock). A node
// grants a free key only to the first waiter, so the queue spans every
// process that locks the key, and this Client's waiters are ordered by it
// like any others: tickets of one Client strictly increase.
//
// Releases wake only the first waiter. The release script publishes the
// released token and the first waiter's ID on the key's channel
// (prefix{key}:released), which every Client with waiters hears through
// one pattern subscription per node, started by its first waiter and kept
// until Close; an Unlock in this Client reads the same ID from the nodes'
// replies. A waiter is woken when a majority of nodes have announced the
// same release, by the ID most of them named. Notices can be lost (a
// subscription reconnecting, a node down); every waiter also polls the
// queue on a timer, which refreshes its place too.
type handoff struct {
	c          *Client
	mu         sync.Mutex
	queues     map[string]*waitQueue // by Redis key
	started    bool                  // subscriptions started (or Client closed)
	stops      []func()
	lastTicket int64
}

type waitQueue struct {
	waiters      map[string]*waiter // this Client's, by ID
	holder       string             // token of this Client's lock on the key, while held
	lastReleased string             // token of this Client's last release of the key
	notices      map[string]*heard  // release notices heard, per released token
	// contended: until then, Lock calls of this Client queue at once
	// instead of trying first: the key's last release that this Client
	// saw found others waiting.
	contended time.Time
}

// heard counts the notices of one release, and the waiters they named.
type heard struct {
	n     int
	named []string
}

// waiter is one waiting Lock call.
type waiter struct {
	place
	wake chan struct{} // buffered: a wake is kept until the waiter looks
}

func (h *handoff) init(c *Client) {
	h.c = c
	h.queues = make(map[string]*waitQueue)
}

// busy reports whether Lock calls for rkey should queue before trying:
// others of this Client wait for it, or its last release found a queue.
func (h *handoff) busy(rkey string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil {
		return false
	}
	return len(q.waiters) > 0 || time.Now().Before(q.contended)
}

// join registers a new waiter for rkey, with a ticket above every ticket
// this Client issued before, and starts the subscriptions on first use.
func (h *handoff) join(rkey string) *waiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		h.started = true
		pattern := globEscape(h.c.cfg.prefix) + "{*}" + releaseSuffix
		for _, n := range h.c.nodes {
			h.stops = append(h.stops, n.watch(pattern, h.notice))
		}
	}
	h.lastTicket = max(time.Now().UnixMicro(), h.lastTicket+1)
	w := &waiter{place: place{id: rand.Text(), ticket: h.lastTicket, lease: h.c.cfg.lease}, wake: make(chan struct{}, 1)}
	h.queue(rkey).waiters[w.id] = w
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
func (h *handoff) leave(rkey string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[rkey]; q != nil {
		delete(q.waiters, w.id)
		h.forget(rkey, q)
	}
}

// forget drops rkey's queue when nothing in it matters any more; callers
// hold h.mu.
func (h *handoff) forget(rkey string, q *waitQueue) {
	if len(q.waiters) == 0 && q.holder == "" && !time.Now().Before(q.contended) {
		delete(h.queues, rkey)
	}
}

// acquired records that this Client now holds rkey with token: releases of
// other tokens announced meanwhile are old news.
func (h *handoff) acquired(rkey, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[rkey]; q != nil {
		q.holder = token
	}
}

// released handles this Client's release of rkey: the nodes named head as
// the first waiter (or none), whom it wakes if it is this Client's.
func (h *handoff) released(rkey, token, head string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil {
		if head == "" {
			return
		}
		q = h.queue(rkey)
	}
	if q.holder == token {
		q.holder = ""
	}
	q.lastReleased = token
	q.wakeNamed(head, h.c.cfg.lease)
	h.forget(rkey, q)
}

// notice handles a release published by a node: the released token, and
// after a NUL the first waiter's ID if any waits. When a majority of nodes
// have announced the release of the same token, the lock can be had: the
// waiter most of them named is woken, if it is this Client's. Waking at the
// first notice would send the attempt while most nodes still hold the key;
// a competitor releasing a partial grant publishes nothing.
func (h *handoff) notice(channel, payload string) {
	rkey := strings.TrimSuffix(channel, releaseSuffix)
	token, head, _ := strings.Cut(payload, "\x00")
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil || q.holder != "" || token == q.lastReleased {
		return // nobody waits, we hold it, or our own release, handled already
	}
	if q.notices == nil || len(q.notices) > 64 { // tokens are unique: forget old ones
		q.notices = make(map[string]*heard)
	}
	n := q.notices[token]
	if n == nil {
		n = &heard{}
		q.notices[token] = n
	}
	n.n++
	if head != "" {
		n.named = append(n.named, head)
	}
	if n.n == h.c.quorum() {
		q.wakeNamed(mostNamed(n.named), h.c.cfg.lease)
	}
}

// wakeNamed wakes this Client's waiter with ID head, if any; with no head
// named, the first of this Client's waiters (one that has not joined the
// nodes' queues yet). It notes whether others wait.
func (q *waitQueue) wakeNamed(head string, lease time.Duration) {
	var w *waiter
	if head != "" {
		q.contended = time.Now().Add(lease)
		w = q.waiters[head]
	} else {
		q.contended = time.Time{}
		for _, x := range q.waiters {
			if w == nil || x.ticket < w.ticket {
				w = x
			}
		}
	}
	if w != nil {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// mostNamed returns the ID named most often ("" for none), the earliest
// named on a tie.
func mostNamed(ids []string) string {
	best, most := "", 0
	for i, id := range ids {
		n := 0
		for _, x := range ids[i:] {
			if x == id {
				n++
			}
		}
		if n > most {
			best, most = id, n
		}
	}
	return best
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

// globEscape quotes the characters that PSUBSCRIBE patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
