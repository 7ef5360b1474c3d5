package redlock

import (
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is how release notices wake this Client's waiters: the notices
// a node publishes on the Client's wake channel, and the replies of the
// Client's own releases (handoff.go has the waiters and the channel).

// released handles this Client's release of rkey: heads are the first
// waiters the nodes that answered named (none: no queue). The waiter a
// majority of nodes named is woken if it is this Client's, but for one
// the release granted the key (letin.go): the notices of the grants, not
// this release, then wake it. A waiter named by fewer may be first only
// where the new holder's attempt came in ahead of this release, and
// would attempt in vain.
func (h *handoff) released(rkey, token string, heads []string) {
	if len(heads) == 0 && h.live.Load() == 0 {
		return // no queue, nor one to make
	}
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

// notice handles a wake-up published by node (its index): the key, the released
// token and the first waiter's ID, NUL-separated. When a majority of nodes
// have announced the release of the same token to this Client, the lock
// can be had: the waiter a majority of them named is woken. Waking at the first
// notice would send the attempt while most nodes still hold the key; a
// competitor releasing a partial grant publishes nothing.
func (h *handoff) notice(node int, payload string) {
	rkey, token, head, ok := splitNotice(payload)
	if !ok {
		return
	}
	if n, ok := strings.CutPrefix(token, wire.LetIn); ok {
		h.letInNotice(node, rkey, head, n)
		return
	}
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
		// last reader may be another, so no token gathers a majority: the
		// waiter named is woken once a majority of nodes have said so
		// since its last attempt (sooner, it would find readers left).
		if w := q.waiters[head]; w != nil {
			if w.readersLeft++; w.readersLeft == h.c.quorum() {
				q.wakeToAttempt(w)
			}
		}
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
		w := q.waiters[head]
		if w != nil && w.t.multiKey() {
			if !w.freeOf(rkey) {
				// A set whose other keys are held still: their releases
				// wake it, but for a split vote's, which wakes nobody.
				if w.waitsOnSplit() {
					q.lookSoon(w)
				}
				return
			}
		}
		q.wakeToAttempt(w)
	}
}

// splitNotice splits a notice's payload into the key, the released token
// and the waiter's ID: tokens and IDs hold no NUL; a key might.
func splitNotice(payload string) (rkey, token, head string, ok bool) {
	j := strings.LastIndexByte(payload, 0)
	if j < 0 {
		return "", "", "", false
	}
	i := strings.LastIndexByte(payload[:j], 0)
	if i < 0 {
		return "", "", "", false
	}
	return payload[:i], payload[i+1 : j], payload[j+1:], true
}

// setLookDelay is how long a set's waiter that a release left waiting for
// other keys waits for their releases before it looks (see lookSoon); a
// waiter granted on a minority waits at least that long (lookShort).
const setLookDelay = 2 * time.Millisecond

// lookSoon wakes the set's waiter w to look, setLookDelay from now (a
// waiter granted a key on a minority looks soon by lookShort). A holder that held
// several of its keys releases them at once, and the notices of the
// others come within about a round trip, when w can attempt at once (its
// wake then cancels this one); if they do not come, a key may have been
// freed unannounced, which the look sees. Callers hold the handoff's mu.
//
// Only a key that w's last look found split can be freed so, by the
// take-back of a split vote's grants (simulator seed 718: a set woken
// on its other key waited 55 ms for a wake that never came). A key held
// by one token on a majority is released with a notice, to its first
// waiter, or it expires (which wakes nobody, and w's timer serves, as
// for a one-key waiter); a key free with another waiter first is that
// waiter's to take, and to release with a notice. Until 2026-11-27
// every such wake looked soon, and in the bench's multi-key workload
// 40–50% of the sets' hand-offs paid for a look that found the other
// key still held (docs/performance.md).
func (q *waitQueue) lookSoon(w *waiter) {
	w.mustLook, w.shortLook = true, false
	q.wakeSoon(w, setLookDelay)
}

// lookShort wakes w to look, as lookSoon does, twice its last look's
// round trip from now (setLookDelay at least): a waiter granted a key on a
// minority of nodes so far (see handoff.onAdmission, setAdmitted and
// grantsStuck). The rest of a release's notices come from nodes as far
// as that look had to reach: 2 ms would look while they are still on
// their way from far nodes, and the look would hold up the wake they
// bring by a round trip. A set's look is called off once no key is
// granted to it on a minority only (callOffShortLook). Callers hold the
// handoff's mu.
func (q *waitQueue) lookShort(w *waiter) {
	w.mustLook, w.shortLook = true, true
	q.wakeSoon(w, max(setLookDelay, 2*time.Duration(w.lookRTT.Load())))
}

// callOffShortLook calls off a set's look that lookShort set, once no key
// of w's is granted on a minority only: the set holds, or waits for keys
// that are held (their releases will wake it). Callers hold the
// handoff's mu.
func (w *waiter) callOffShortLook(quorum int) {
	if !w.shortLook || !w.soonDue || slices.ContainsFunc(w.keys, func(a admits) bool {
		n := bits.OnesCount64(a.admitted)
		return n > 0 && n < quorum
	}) {
		return
	}
	w.soon.Stop()
	w.soonDue, w.mustLook, w.shortLook = false, false, false
}

// attemptSoon wakes the set's waiter w to attempt, setLookDelay from now,
// unless a wake comes first: every key's release has reached it, granted
// on a majority of nodes each, but not yet on a common majority (see
// handoff.setAdmitted). The rest of those releases' notices are about a
// round trip behind, and hold the set without an attempt; if the releases
// ran on different nodes (holders split the keys between them: simulator
// seed 10130), they never come, and the attempt takes the keys granted
// to the set's place. Callers hold the handoff's mu.
func (q *waitQueue) attemptSoon(w *waiter) {
	w.mustLook, w.shortLook = false, false
	q.wakeSoon(w, setLookDelay)
}

// wakeSoon wakes w d from now, as w.mustLook then says, unless
// a wake to attempt comes first. Once it has woken w, nothing is due:
// a call-off then (callOffShortLook) must not clear mustLook, which would
// turn the wake to look it sent into one to attempt (a set refused for a
// key still held, whose attempt took back the grants it had: 1 run in
// 200 of integration's TestSetGrantedByReleases beside a CPU hog;
// TestShortLookWakeStaysALook). Callers hold the handoff's mu.
func (q *waitQueue) wakeSoon(w *waiter, d time.Duration) {
	w.soonDue = true
	if w.soon != nil {
		w.soon.Reset(d)
		return
	}
	mu := &q.h.mu
	w.soon = time.AfterFunc(d, func() {
		mu.Lock()
		defer mu.Unlock()
		if w.soonDue {
			w.soonDue = false
			q.wake(w)
		}
	})
}

// freeOf notes that the release of rkey reached a set's waiter w, and
// reports whether none of its keys is known to be held now; callers hold
// the handoff's mu.
func (w *waiter) freeOf(rkey string) bool {
	if w.freed == nil {
		w.freed = map[string]time.Time{}
	}
	w.freed[rkey] = time.Now()
	delete(w.blocked, rkey)
	return len(w.blocked) == 0
}

// block records the keys of a set's waiter w that its look, sent at sent,
// found it waiting for on a majority of nodes (held, or another waiter
// first), each mapped to whether it was split (heldKeys): a release of
// one of its keys that leaves others it waits for does not wake it to
// attempt, and wakes it to look only where one of those was split (see
// lookSoon); once each has been released to it (after the look was
// sent: a release that reached w meanwhile may be what the look missed),
// to attempt.
func (h *handoff) block(w *waiter, held map[string]bool, sent time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range held {
		if w.freed[k].After(sent) {
			delete(held, k)
		}
	}
	w.blocked = held
}

// waitsOnSplit reports whether a key a set's waiter w still waits for was
// split at its last look (see block); callers hold the handoff's mu.
func (w *waiter) waitsOnSplit() bool {
	for _, split := range w.blocked {
		if split {
			return true
		}
	}
	return false
}

// lookFirst reports whether w, woken, should look before it attempts (a
// set's: see block; any waiter's woken by lookShort), and forgets it.
func (h *handoff) lookFirst(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	look := w.mustLook
	w.checkOnly = look && w.shortLook
	w.mustLook, w.shortLook = false, false
	return look
}

// wokenBy returns the key whose release last woke w, and forgets it.
func (h *handoff) wokenBy(w *waiter) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := w.woke
	w.woke = ""
	return k
}

// attempting notes that w attempts: the releases counted towards its next
// wake are those from now on.
func (h *handoff) attempting(w *waiter) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.readersLeft = 0
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
		if w != nil && isGrantee(w.ID) && !w.attempted {
			return w.ID // the nodes granted it the key: their notices count (letin.go)
		}
	} else {
		q.contended = time.Time{}
		for _, x := range q.waiters {
			if w == nil || x.Ticket < w.Ticket {
				w = x
			}
		}
	}
	q.wake(w) // (a set's that waits for other keys too looks first, as its mustLook says)
	if w == nil {
		return ""
	}
	return w.ID
}

// wakeToAttempt wakes w, if not nil, to attempt: a look it was to make
// first (lookSoon, lookShort) is not made. Callers hold the handoff's mu.
func (q *waitQueue) wakeToAttempt(w *waiter) {
	if w != nil {
		w.mustLook = false
	}
	q.wake(w)
}

// wake wakes w, if not nil, by the release of q's key; a wake is kept
// until w looks.
func (q *waitQueue) wake(w *waiter) {
	if w != nil {
		if w.soon != nil && !w.mustLook {
			w.soon.Stop() // a wake to attempt supersedes one to come
		}
		w.soonDue = w.soonDue && w.mustLook
		w.woke = q.rkey
		select {
		case w.wake <- struct{}{}:
		default:
		}
		if w.cut != nil && !w.mustLook {
			select { // after the wake: a look it cuts finds it there
			case w.cut <- struct{}{}:
			default:
			}
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
