package redlock

import (
	"strings"
	"sync"
)

// handoff lets a waiting Lock try again as soon as the key is released,
// instead of only sleeping. Releases are announced two ways: an Unlock in
// this Client wakes the first waiter for the key directly, and the release
// script publishes the released token on the key's channel
// (prefix{key}:released), which the Client hears through one pattern
// subscription per node, started by the first waiter and kept until Close.
//
// A notice wakes only when a majority of nodes have announced the same
// release. Waiters of one Client queue per key in arrival order and only the
// first is woken, so a release causes one attempt, not one per waiter, and a Lock
// that arrives while others wait queues behind them instead of barging in.
// Notices can be lost (a subscription reconnecting, a node down); every
// waiter also has its retry timer, bounded by the holder's remaining TTL.
type handoff struct {
	c       *Client
	mu      sync.Mutex
	queues  map[string]*waitQueue // by Redis key
	started bool                  // subscriptions started (or Client closed)
	stops   []func()
}

type waitQueue struct {
	waiters      []*waiter
	holder       string         // token of this Client's lock on the key, while held
	lastReleased string         // token of this Client's last release of the key
	notices      map[string]int // release notices heard per token
}

type waiter struct {
	wake chan struct{} // buffered: a wake is kept until the waiter looks
}

func (h *handoff) init(c *Client) {
	h.c = c
	h.queues = make(map[string]*waitQueue)
}

// busy reports whether Lock calls of this Client wait for rkey.
func (h *handoff) busy(rkey string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	return q != nil && len(q.waiters) > 0
}

// join queues a new waiter for rkey, starting the subscriptions on first use.
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
	q := h.queues[rkey]
	if q == nil {
		q = &waitQueue{}
		h.queues[rkey] = q
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	q.waiters = append(q.waiters, w)
	return w
}

// leave removes w from rkey's queue. A wake that w did not use passes on to
// the next waiter.
func (h *handoff) leave(rkey string, w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil {
		return
	}
	for i, x := range q.waiters {
		if x == w {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if i == 0 && len(w.wake) > 0 {
				q.wakeFirst()
			}
			break
		}
	}
	if len(q.waiters) == 0 && q.holder == "" {
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

// released hands rkey to the first waiter after this Client released it.
func (h *handoff) released(rkey, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil {
		return
	}
	if q.holder == token {
		q.holder = ""
	}
	q.lastReleased = token
	q.wakeFirst()
	if len(q.waiters) == 0 {
		delete(h.queues, rkey)
	}
}

// notice handles a release published by a node. The first waiter is woken
// when a majority of nodes have announced the release of the same token:
// then the lock can be had. Waking at the first notice would send the
// attempt while most nodes still hold the key; a competitor releasing a
// partial grant (a minority of nodes) wakes nobody.
func (h *handoff) notice(channel, token string) {
	rkey := strings.TrimSuffix(channel, releaseSuffix)
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[rkey]
	if q == nil || q.holder != "" || token == q.lastReleased {
		return // nobody waits, we hold it, or our own release, handled already
	}
	if q.notices == nil || len(q.notices) > 64 { // tokens are unique: forget old ones
		q.notices = make(map[string]int)
	}
	q.notices[token]++
	if q.notices[token] == h.c.quorum() {
		q.wakeFirst()
	}
}

func (q *waitQueue) wakeFirst() {
	if len(q.waiters) > 0 {
		select {
		case q.waiters[0].wake <- struct{}{}:
		default:
		}
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
