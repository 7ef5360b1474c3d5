package redlock

import (
	"context"
	"math/bits"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is a reader let in by a writer's release (see wire's
// queueLua, wakeFront): where a writer's release finds readers at the
// front of the key's queue, each node adds their places' IDs to the
// readers, scored by each place's own lapse, takes the places out and
// tells their Clients (a LetIn notice). A waiting RLock holds once a
// majority of nodes have let it in, with its place's ID as the lock's
// token: one round after the release, where an attempt of its own would
// be two. docs/design.md ("Readers let in by the writer's release") has
// the argument; in short:
//
//   - Validity. Each look of such a reader carries a number n, and the
//     node keeps the number of the last look that refreshed the place
//     beside it; a release that lets the place in names that number in
//     its notice. The look set the place's lapse, at or after it reached
//     the node, to a lease from then on the node's clock, so the let-in
//     lives until at least a lease after the look's send: the lock is
//     valid until the earliest of those sends, over the best majority,
//     plus the lease, less the drift. No node clock is read, and no order
//     between a notice and a look's answer is assumed.
//   - Restarts. A node that restarted lost its readers; one that lets a
//     place in right after could be letting it in beside a writer that
//     still counts the node. Attempts are kept from that by the restart
//     guard; a let-in arrives on the subscription, which a restart
//     closes: a node counts once a look sent after its subscription's
//     last confirmation has brought back its run_id, which the guard
//     judged, and not while the guard refuses its grants (countsFrom).
//   - Stray admissions. A reader let in where it does not hold by its
//     place's ID (it attempted instead, gave up, or the let-in came
//     late) has the ID released there (abandon, letInNotice): a reader's
//     release of a place's ID also takes the place out of the queue, so
//     no later release lets it in again.
//
// The lock then extends to its TTL, off the Lock call's path, once a
// tenth of its validity has passed (extendLetIn): until then its validity
// is less than a lease (1 s by default).
//
// A writer granted the key by a release is the same on the Client's side
// (docs/design.md, "A writer granted the key by the release"): where a
// one-key mutex's release finds a waiter at the head of the queue that
// may be granted the key (grantable: its place's ID carries ".wi"), each
// node sets the key to that ID until the place's lapse, takes the place
// out and tells its Client with the same notice. Two rules more:
//
//   - Its attempt ends its grants. The writer's attempts take a key
//     granted to its place (the acquire script reads it as free for that
//     place), but a refused one may reserve it for another waiter and a
//     failed one's take-back deletes it. So once it has attempted (or been
//     handed an attempt, handover.go) its grants count no more: they wake
//     it to attempt, and its attempt takes them.
//   - No grant with the hand-over inside one Client. An Unlock that sends
//     its next waiter's attempt behind its release tells the nodes
//     (Op.WakeOnly), which then wake the waiter as before.

// grantable reports whether a waiter for t, with lc, may be granted the
// key by a release (see wire's queueLua grant): a one-key mutex's, a
// read-write lock's writer, a semaphore's (a slot) or a set's (each key
// by its release: the set holds where every key is granted), without a
// token of its own (it would hold by its place's ID); with fencing, a
// one-key mutex's, a writer's or a semaphore's only (fencedGrant), whose
// holder's release hands out its fencing token; with metadata too: its looks keep
// its metadata on the nodes (wire's queueSrc, queueMultiSrc), which the
// grant sets beside its ID (since 2026-12-03; a node whose kept value
// lapsed wakes it to attempt instead). An election's candidate too: its
// looks keep its value (its metadata), and the release that grants it
// writes the value and announces it (wire's releaseSrc).
func grantable(t target, lc *lockConfig) bool {
	if t.mode == wire.ModeElection {
		return lc.token == "" && lc.fencing
	}
	kind := (t.mode == wire.ModeMutex || t.mode == wire.ModeWrite) && t.rkeys == nil || t.multiKey()
	return kind && lc.token == "" && (!lc.fencing || fencedGrant(t))
}

// fencedGrant reports whether a fenced waiter for t may be granted the key
// by a release: a one-key mutex's, a semaphore's (a slot, each a mutex
// key with a counter of its own; since 2026-12-04) or a read-write
// lock's writer, whose holder's release proposes the waiter's fencing
// token (Unlock; a reader's release proposes none). A node names it
// with the grant only where it is above the node's fence counter, which
// it raises to it (wire's releaseSrc): the fast path's token, once a
// majority name it (docs/fencing.md); a grant that names none keeps the
// key for the waiter's attempt.
func fencedGrant(t target) bool {
	return (t.mode == wire.ModeMutex || t.mode == wire.ModeWrite || t.mode == wire.ModeElection) && t.rkeys == nil
}

// isGrantee reports whether id is the place of a writer a release may
// grant the key (see grantable).
func isGrantee(id string) bool { return wire.IsPlaceID(id) }

// keptLooks bounds the looks whose sends a waiter keeps: looks are a
// third of a lease apart, or closer when woken, and a let-in names the
// last look that reached the node.
const keptLooks = 64

// numberLook returns the number of w's next look, sent at sent, and keeps
// its send.
func (h *handoff) numberLook(w *waiter, sent time.Time) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.seq++
	w.sends[w.seq] = sent
	delete(w.sends, w.seq-keptLooks)
	return w.seq
}

// countsFrom reports whether an admission by node i counts: the
// subscription it came on is the process the restart guard knows. A
// restart closes the subscription, and its confirmation again, or the
// first one, may come from a process that restarted unseen: so a node
// counts once a look sent after its subscription's last confirmation has
// brought back the node's run_id (heardProcess), which the guard then
// judged, and not while the guard refuses the node's grants.
func (h *handoff) countsFrom(i int) bool {
	if h.c.cfg.guard <= 0 || mutated(mutLetInUnguarded) {
		return true
	}
	n := h.confirms[i].Load()
	return n != 0 && h.heard[i].Load() == n && !h.c.guard.refusing(i)
}

// hearing returns judge, seeing first each node's run_id in the answers
// to a look sent now (see heardProcess).
func (h *handoff) hearing(judge func(int, wire.Result) wire.Result) func(int, wire.Result) wire.Result {
	confirms := make([]uint64, len(h.confirms))
	for i := range confirms {
		confirms[i] = h.confirms[i].Load()
	}
	return func(i int, r wire.Result) wire.Result {
		h.heardProcess(i, r.RunID, confirms[i])
		return judge(i, r)
	}
}

// heardProcess notes node i's run_id, from the answer to a look sent when
// its subscription had been confirmed confirms times: the guard learns it
// (a new process starts its period), and the node's admissions may count
// (countsFrom) if no confirmation came since.
func (h *handoff) heardProcess(i int, runID string, confirms uint64) {
	if runID == "" || h.c.guard == nil {
		return
	}
	h.c.guard.learn(i, runID)
	if confirms != 0 && h.confirms[i].Load() == confirms {
		h.heard[i].Store(confirms)
	}
}

// letInNotice handles node i's notice that it let the reader id in to
// rkey's readers, or granted the writer id the key rkey (a semaphore's
// waiter: the slot rkey), naming the look n ("": none) whose send it
// counts from: counted for the waiter, which is woken once a majority
// count; released at once for a waiter that ended without it.
func (h *handoff) letInNotice(i int, rkey, id, n string) {
	h.mu.Lock()
	var w *waiter
	q := h.queues[rkey]
	if q != nil {
		w = q.waiters[id]
	}
	if w == nil || w.sends == nil {
		_, gone := h.abandoned[id]
		h.mu.Unlock()
		if gone {
			h.releaseLetIn(rkey, id, 1<<i)
		}
		return
	}
	defer h.mu.Unlock()
	a := w.admitsOf(rkey)
	if a == nil {
		return
	}
	a.admitted |= 1 << i
	if w.took {
		return
	}
	seq, fence, valued, err := parseAdmission(n)
	sent, known := w.sends[seq]
	if mutated(mutLetInLastLook) {
		sent, known = w.sends[w.seq], err == nil
	}
	counts := err == nil && known && h.countsFrom(i) && (!w.attempted || mutated(mutGrantAfterAttempt)) && (w.backing&(1<<i) == 0 || mutated(mutBackingIgnored))
	if a.fences != nil && fence <= 0 {
		counts = false // a fenced waiter's grant without a token (the counter was ahead, an unfenced release): it attempts
	}
	if !valued && keepsMetadata(w.ID) && !mutated(mutGrantWithoutMetadata) {
		counts = false // a grant without its metadata (an older Client's release): it attempts
	}
	if counts {
		a.from[i] = sent
		if mutated(mutLetInFromNotice) {
			a.from[i] = time.Now()
		}
		a.counted |= 1 << i
		if a.fences != nil {
			a.fences[i] = fence
		}
	}
	h.onAdmission(q, w, rkey, a, counts)
}

// onAdmission wakes w, if its admissions a at rkey call for it now that
// another came (counts: that one counts); callers hold h.mu.
func (h *handoff) onAdmission(q *waitQueue, w *waiter, rkey string, a *admits, counts bool) {
	switch {
	case w.t.multiKey():
		h.setAdmitted(q, w, rkey, a)
	case counts && a.agreeingCount() == h.letInQuorum():
		q.wakeToAttempt(w) // (a semaphore's: to the slot, rkey)
	case bits.OnesCount64(a.admitted) >= h.c.quorum() && !h.mayCount(w, a):
		// Not to hold by these admissions (some do not count, or a fenced
		// waiter's have no token or name different ones): let in on a
		// majority all the same, w attempts (as a release's notices would
		// have woken it to), and its attempt is granted where it was let
		// in; but not while the nodes yet to let it in could still make a
		// majority that counts (a writer's attempt ends its grants).
		q.wakeToAttempt(w)
	case (counts || bits.OnesCount64(a.admitted) < h.c.quorum()) && !w.soonDue && !w.holdsAny(h.letInQuorum()) && !mutated(mutGrantsStuckWait):
		// Granted on a minority so far: the rest of the release's notices
		// are about a round trip behind. Should they not come (the other
		// nodes granted other waiters: see grantsStuck), a look sees it;
		// also where the grants do not count (a node whose process the
		// restart guard has yet to hear of): they hold the key all the same.
		// (A semaphore's waiter that holds by another slot takes that
		// one: a look would hold it up by a round.)
		q.lookShort(w)
	}
}

// takeLetIn returns the Lock its admissions hold, if they do (after
// awaitGrants); nil: the waiter attempts.
func (s *waitLoop) takeLetIn() *Lock {
	s.awaitGrants()
	return s.c.takeLetIn(s.ctx, s.t, s.lc, s.w, s.attempts)
}

// grantsHeldWait is the least awaitGrants waits for the notices of
// grants a look found on a majority: a busy CPU reads a notice that many
// ms after the look's answer, which the node sent after it.
const grantsHeldWait = 10 * time.Millisecond

// awaitGrants waits, where the waiter's last look found the key granted
// to its place (or it let in), for the wake its grants' notices bring once
// they hold: for twice the look's round trip, a millisecond at least, or
// grantsHeldWait where the look found them on a majority (their notices
// then make one), within the node timeout; a wake that came meanwhile
// ends it at once, and so does one that is not the grants' (the attempt
// follows). Each node published its notice before it ran the look, but
// the notice comes on the subscription and may be read after the look's
// answer: an attempt then would take the grants with a token of its own,
// one round more (a Lock of TestWriterGrantedByRelease, once under load;
// a semaphore's waiter, which waited for none, 1 Acquire in 120 of
// TestSemaphorePermitsGrantedByRelease beside a CPU hog). Notices that
// never come (a subscription down) cost that wait, and the attempt.
func (s *waitLoop) awaitGrants() {
	if s.w == nil || s.w.grantSeen == 0 {
		return
	}
	floor := time.Millisecond
	if s.w.grantsHeld {
		floor = grantsHeldWait
	}
	d := min(max(2*s.w.grantSeen, floor), s.c.nodeTimeout(s.lc.ttl))
	s.w.grantSeen = 0
	if s.c.hand.settled(s.w) {
		return
	}
	_, _ = s.c.sleepOrWake(s.ctx, s.w, d)
}

// settled reports whether no notice can change what w does next: its
// admissions hold already (the wake they brought woke it: the look that
// saw the grants came before it), they count no more (it attempted), or
// every node its last look found granting it has told it so (a set
// granted one key, or granted its keys on different nodes, whose look
// found them all free: it attempts at once, as before sets waited here).
// A wait for a wake that came already lasted its whole bound: with
// grantsHeldWait, 10–20 ms at the p99 of the bench's hand-offs.
func (h *handoff) settled(w *waiter) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return w.took || w.attempted || w.holdsAny(h.letInQuorum()) || !w.noticesDue()
}

// mayCount reports whether w's admissions a counted so far, with those
// of the nodes that have not let it in yet and would count, could still
// hold the lock; callers hold h.mu.
func (h *handoff) mayCount(w *waiter, a *admits) bool {
	n := a.agreeingCount()
	for i := range h.c.nodes {
		if a.admitted&(1<<i) == 0 && h.countsFrom(i) {
			n++
		}
	}
	return n >= h.letInQuorum() && !w.attempted
}

// takeLetIn returns the lock w holds by its admissions, if it does (nil
// otherwise: it attempts as before): a reader's, a writer's, or a
// semaphore's waiter's permit (the slot granted); and extends it to its
// TTL in the background. An auto-extended lock (Do, an election's) ends
// TTL/10 before its validity, which a let-in's, under a lease, may not
// leave: until its first extension, which its extender makes once a tenth
// of that validity has passed, it ends a tenth of it before instead; one whose validity leaves
// that extension less than letInExtendWithin (or its node timeout, if
// less) is extended before it is returned. (Until 2026-12-03 every
// auto-extended let-in was: a hand-off by grant to Do or to a candidate
// was two rounds.)
func (c *Client) takeLetIn(ctx context.Context, t target, lc *lockConfig, w *waiter, n int) *Lock {
	if w == nil || w.sends == nil {
		return nil
	}
	l, a := c.letInLock(t, lc, w)
	if l == nil {
		return nil
	}
	if c.observing() {
		c.emit(Event{Kind: EventAcquire, Context: ctx, Key: l.key, Read: l.reader(), Attempt: n, Queued: w.Place.Time(), LetIn: true, Duration: time.Since(l.acquired), Validity: l.Validity(), Nodes: c.letInNodes(a)})
	}
	if ttl := min(lc.ttl, time.Until(l.acquired.Add(lc.maxHold))); lc.autoExtend && ttl >= minTTL {
		if v := l.Validity(); v-v/endMarginDivisor-v/letInExtendAfter > min(c.nodeTimeout(ttl), letInExtendWithin) {
			l.margin = v / endMarginDivisor
		} else if err := l.extend(ctx, ttl); err != nil {
			_ = l.Unlock(context.WithoutCancel(ctx)) // its admissions go: it attempts
			return nil
		}
	}
	if err := c.track(l); err != nil {
		_ = l.Unlock(context.WithoutCancel(ctx))
		return nil
	}
	if !lc.autoExtend {
		c.extendLetIn(ctx, l, lc.ttl)
	}
	// Its place on the nodes that did not let it in yet stays: a release
	// there lets it in too (in its own name, which its Unlock releases),
	// and its Unlock, by the place's ID, takes the place out. A leave now
	// would cost each hand-off a script on the nodes whose notices were
	// still on their way.
	return l
}

// letInLock returns the lock w's admissions make, if they count on a
// majority with validity left, with those admissions, and notes that w
// took it.
func (c *Client) letInLock(t target, lc *lockConfig, w *waiter) (*Lock, admits) {
	// A let-in lives until its place's lapse: a lease from the send of the
	// look it names; the lock claims no more than its TTL of that.
	d := min(c.cfg.lease, lc.ttl)
	c.hand.mu.Lock()
	defer c.hand.mu.Unlock()
	k, a, from, ok := w.bestAdmits(c.hand.letInQuorum())
	until := from.Add(d - drift(d, c.cfg.drift))
	// Taken once only: a lock it took and gave back (its extension
	// failed) released its admissions.
	if w.took || w.attempted && !mutated(mutGrantAfterAttempt) || !ok || !time.Now().Before(until) {
		if isGrantee(w.ID) {
			w.attempted = true // the caller attempts next
		}
		return nil, admits{}
	}
	w.took = true
	if t.slots != nil {
		t = t.slots[k] // a semaphore's permit: the slot granted
	}
	_, fence := a.agreeing() // a fenced waiter's token (0: none)
	l := &Lock{c: c, target: t, token: w.ID, cfg: *lc, fence: fence, acquired: from, ttl: lc.ttl, until: until}
	l.initNodes(len(c.nodes))
	for i := range l.nodes {
		l.nodes[i].granted = a.admitted&(1<<i) != 0
	}
	l.noteEnd()
	return l, a
}
