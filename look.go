package redlock

import (
	"context"
	"slices"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is a waiter's look at the wait queues of its keys: taking,
// refreshing and leaving its place, and what a look tells the wait loop
// (wait.go): attempt now, or look again when.

// leaveOn takes the place p out of the queues of t's keys on nodes, in
// the background: the leaves are queued on the nodes' streams when it
// returns (see post), so nothing this Client sends next overtakes them.
func (c *Client) leaveOn(ctx context.Context, nodes []node, t target, p *wire.Place, ttl time.Duration) {
	if len(nodes) > 0 {
		t.eachQueueTarget(func(q target) { c.post(ctx, c.queueOp(q, p, true), nodes, ttl) })
	}
}

// queueOp prepares a look at the queues of t's keys for the place p, or
// with quiet, p's leaving them.
func (c *Client) queueOp(t target, p *wire.Place, quiet bool) *wire.Op {
	o := t.op(wire.OpQueue, "", "", 0)
	o.Place, o.Quiet, o.Wake = p, quiet, c.hand.wakeArg
	return o
}

// pollQueue joins w to the key's queue on every node, or refreshes its place,
// and tells whether w may attempt now: a zero failure when w is first on a
// majority of nodes that have the key free, with the index of the slot
// that was so for a semaphore's waiter (0 otherwise). A node that has w
// first and the key free counts for; any other answer against.
func (c *Client) pollQueue(ctx context.Context, lc *lockConfig, w *waiter) (int, tryFailure) {
	if err := ctx.Err(); err != nil {
		return -1, tryFailure{cause: err}
	}
	c.hand.awaitSubscribed(ctx, c.nodeTimeout(lc.ttl))
	sent := time.Now()
	check := w.checkOnly
	w.checkOnly = false
	if !w.t.choosesSlot() {
		w.uncut()
		req := c.lookRequest(w, w.t, lc, check)
		if w.sends != nil {
			req.op.Seq = c.hand.numberLook(w, sent)
			req.judge = c.hand.hearing(req.judge)
		}
		r := c.send(ctx, req)
		w.lookRTT.Store(int64(time.Since(sent)))
		c.endLook(w, r)
		if r.cutShort() && w.unwake() {
			return 0, tryFailure{} // a set woken to attempt while it looked
		}
		notePlace(w, r, c.quorum())
		gaveBack := c.giveBackStuck(w, r)
		w.noteGrants(sent, r)
		if w.t.multiKey() {
			c.hand.block(w, heldKeys(r, w.t.rkeys, c.quorum()), sent)
		}
		return c.judgeChecked(w, check, gaveBack, sent, r)
	}
	// A semaphore's waiter looks at every slot's queue at once: one batch
	// per node, one node timeout at most.
	reqs := make([]request, len(w.t.slots))
	var seq int64
	var judge func(int, wire.Result) wire.Result
	if w.sends != nil { // a release may grant it a slot: one look's number for all
		seq, judge = c.hand.numberLook(w, sent), c.hand.hearing(w.judge)
	}
	for i, st := range w.t.slots {
		reqs[i] = c.lookRequest(w, st, lc, check)
		reqs[i].nodes, reqs[i].timed = c.nodes, c.timed
		if seq != 0 {
			reqs[i].op.Seq, reqs[i].judge = seq, judge
		}
	}
	rs := fanOutAll(ctx, reqs)
	w.lookRTT.Store(int64(time.Since(sent)))
	c.endLook(w, rs...)
	w.noteGrants(sent, rs...)
	return c.judgeChecked(w, check, c.giveBackStuck(w, rs...), sent, rs...)
}

// judgeChecked is judgeLook for a look that may have been called to check
// w's grants (see checkGrants); noteGrants has noted the look.
func (c *Client) judgeChecked(w *waiter, check, gaveBack bool, sent time.Time, rs ...*round) (int, tryFailure) {
	hint, held, more := w.checkGrants(check, gaveBack, sent)
	if more && held {
		return -1, tryFailure{r: rs[0], hint: hint}
	}
	i, f := c.judgeLook(w, sent, rs...)
	switch {
	case !more:
	case i >= 0:
		w.checkOnly, w.grantChecks = false, 0 // it attempts
	default:
		f.hint = sooner(f.hint, hint)
	}
	return i, f
}

// endLook notes the nodes w's look rs heard from (its rounds go to the
// same nodes in one batch each: the first tells), then hands the calls
// still running to heardLate, which adds their nodes back as they answer.
func (c *Client) endLook(w *waiter, rs ...*round) {
	w.heard.Store(heardFrom(rs[0], w.heard.Load())) // before late answers add to it
	for _, r := range rs {
		r.finish(&c.bg, w.heardLate)
	}
}

// lookRequest is the round of w's look at the queues of t's keys (w's, or
// one slot of a semaphore's). A look that waits for every answer (see
// lookEnded) waits no longer than for the nodes that answered w's last
// look: a node silent then (hung, cut off) would hold each such look up
// by the node timeout, and the looks that follow a key running out on
// the nodes one after another (a holder that never released) are such
// looks, one after the other (two node timeouts before a waiter took an
// expired lock, with a node frozen: TestExpiryTakeoverPastHungNode).
func (c *Client) lookRequest(w *waiter, t target, lc *lockConfig, check bool) request {
	req := request{op: c.queueOp(t, &w.Place, false), need: c.quorum(), timeout: c.nodeTimeout(lc.ttl), stop: lookEnded, judge: w.judge, cut: w.cut}
	if w.sends != nil && lc.meta != "" && isGrantee(w.ID) {
		req.op.Value = lc.meta // its metadata (a candidate's value), for the release that grants it (wire's queueSrc)
	}
	if check {
		req.stop = nil // a look that checks w's grants (checkGrants) counts every node
	}
	if heard := w.heard.Load(); heard != 0 {
		req.settled = func(rs []wire.Result) bool { return answeredAll(rs, heard) }
	}
	return req
}

// answeredAll reports whether every node in the set nodes (bit i: node i)
// has answered among rs (those not in yet are zero).
func answeredAll(rs []wire.Result, nodes uint64) bool {
	for i := range rs {
		if nodes&(1<<i) != 0 && !rs[i].Answered {
			return false
		}
	}
	return true
}

// heardLate is the late handler of w's looks: a node whose answer came
// after the look had ended is heard from again, so that the next look
// waits for it (a node that missed a deadline, now answering, would
// otherwise never be waited for again).
func (w *waiter) heardLate(i int, res wire.Result) func() {
	if res.Err == nil || wire.IsReply(res.Err) {
		w.heard.Or(1 << i)
	}
	return nil
}

// heardFrom returns, as a set (bit i: node i), the nodes that answered r,
// and those of heard still to answer when r was decided before its
// deadline: a node drops out when it misses a deadline, or has never
// answered.
func heardFrom(r *round, heard uint64) uint64 {
	var nodes uint64
	for i, res := range r.results {
		if res.Answered || res.Undecided() && heard&(1<<i) != 0 {
			nodes |= 1 << i
		}
	}
	return nodes
}

// judgeLook judges the rounds of w's look, sent at sent: one, or one per
// key whose queue w may be served from (a semaphore's slots). It returns
// the index of a round that found w first on a majority of nodes with the
// key free (w may attempt that key now), or −1 and the failed try, with
// when to look again at the latest.
func (c *Client) judgeLook(w *waiter, sent time.Time, rs ...*round) (int, tryFailure) {
	ok := 0
	for i, r := range rs {
		if r.tally.won() {
			return i, tryFailure{}
		}
		ok += r.tally.ok
	}
	f := tryFailure{r: rs[0]}
	for _, r := range rs {
		if f.unusable = r.unusable(); f.unusable != "" {
			f.r = r
			break
		}
	}
	// More nodes than last time have w first with the key free: a release
	// is under way, and the rest of it is about a round trip behind. Look
	// again then: its notices may never make a majority (nodes that named
	// another first waiter), and the strategy's delay would be a stall.
	// Once per change: a key left free on a minority (a holder's acquire
	// that never reached them) must not have w look every round trip.
	underWay := ok > w.free
	w.free = ok
	if underWay {
		f.hint = max(time.Since(sent), time.Millisecond)
		return -1, f
	}
	// The key held, but by no token on a majority: a split vote's grants
	// on their way out, whose take-back wakes nobody; look again within
	// two rounds, as a refused attempt does after a split vote (a plain
	// attempt's refusal names no holder: this look is the first to see).
	// A holder on a bare majority with a node silent looks the same: each
	// such look in a row doubles the bound, so that a long holding costs a
	// few looks, not one every two rounds. Only the waiter the key's
	// queue would let in looks so: not a one-key waiter with another
	// ahead of it on every node that answered (see splitSeen).
	me := w.ID
	if w.t.multiKey() {
		me = "" // (a set's Head is its ID only where it is first on every key)
	}
	if slices.ContainsFunc(rs, func(r *round) bool { return splitSeen(r, c.quorum(), me) }) {
		f.hint = jitter(time.Microsecond, 2*time.Since(sent)<<min(w.splits, 20)+time.Microsecond)
		w.splits++
		return -1, f
	}
	w.splits = 0
	for _, r := range rs {
		f.hint = sooner(f.hint, lookHint(r, w))
	}
	return -1, f
}

// lookHint is when w should look again after a look's round r at the
// latest (0: no bound): first where the key is held, when the holder's
// keys are gone; free where another is first, when that waiter's place
// lapses, should it be gone.
func lookHint(r *round, w *waiter) time.Duration {
	var hint time.Duration
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
		hint = sooner(hint, d+time.Millisecond)
	}
	return hint
}

// heldKeys returns the keys of a set (rkeys) that its look r found it
// waiting for (held, or another waiter first) on a majority of the nodes
// that answered: a look ends at its decision, and a key held on a bare
// majority of the nodes may show on fewer of those that answered by then.
// (A key counted that is not held costs a look before the set's next
// attempt; one missed, an attempt in vain.) Each maps to whether it was
// split: held on some node, and by no token on a majority of nodes (see
// lookSoon).
func heldKeys(r *round, rkeys []string, quorum int) map[string]bool {
	held := map[string]bool{}
	for i, k := range rkeys {
		n, answered := 0, 0
		for _, res := range r.results {
			if res.Answered && res.Status != wire.StatusFailed {
				answered++
				if res.Details().Waits&(1<<i) != 0 {
					n++
				}
			}
		}
		if 2*n > answered {
			held[k] = keySplit(r.results, i, quorum)
		}
	}
	return held
}

// keySplit reports whether a set's look (results) found its i-th key held
// on some node, and by no token on quorum of them: a split vote's grants,
// or a holder the look heard from too few nodes to tell (either way, a
// release may free it unannounced).
func keySplit(results []wire.Result, i, quorum int) bool {
	held := false
	for j, res := range results {
		tok := keyHolder(res, i)
		if tok == "" {
			continue
		}
		held = true
		n := 0
		for _, other := range results[j:] {
			if keyHolder(other, i) == tok {
				n++
			}
		}
		if n >= quorum {
			return false
		}
	}
	return held
}

// keyHolder returns the token a node's answer to a set's look names as
// the holder of the set's i-th key, "" if none (or the node failed).
func keyHolder(res wire.Result, i int) string {
	if !res.Answered || res.Status == wire.StatusFailed {
		return ""
	}
	return res.KeyHolder(i)
}

// splitSeen reports whether a look found the key held on some node while
// a majority of nodes answered and no token held it on a majority of them,
// and the key free with another waiter first on none of them unless with
// this one first on some. The key free on some nodes with another waiter
// first, and held on the others, is mostly a hand-off to that waiter under
// way (its attempt has reached some nodes, and its grants are coming in on
// the rest), and if it is a split vote, that waiter tries again, not this
// one, which the queue would refuse: a look then is timed as any other
// (lookHint). Before 2026-11-26, the Lock that released the key and queued
// again at once looked again within two rounds at most hand-offs, seeing
// the next holder's attempt half landed: 1.35–1.37 queue scripts per node
// per acquisition in the contention measure, where one is the join.
//
// With id, a one-key waiter's place ID, the key must also have id first
// in its queue on some node that answered, or be granted to id there: a
// split's take-back leaves the key to the queue's first waiter, and only
// that waiter's look can act on it (a later waiter's look lets it in
// nowhere, and it is told when the waiters ahead of it have gone). Before
// 2026-12-04 every waiter looked again: a semaphore's waiters found a
// slot's grant by release half landed at 0.5–0.7 looks (of every slot)
// per permit, with 16 processes (docs/performance.md).
func splitSeen(r *round, quorum int, id string) bool {
	answered, held, mine, other := 0, 0, 0, 0
	most, ahead := 0, id == ""
	for _, res := range r.results {
		if !res.Answered || res.Status == wire.StatusFailed {
			continue
		}
		answered++
		ahead = ahead || res.Head == id || res.Value == id
		switch {
		case res.Status == wire.StatusHeld && res.Value != "":
			held++
			most = max(most, countHolder(r.results, res.Value))
		case res.Status == wire.StatusOK:
			mine++
		case res.Status == wire.StatusQueued:
			other++
		}
	}
	if other > 0 && mine == 0 {
		return false
	}
	return (ahead || mine > 0) && held > 0 && answered >= quorum && most < quorum
}

// countHolder returns how many results name token as the key's holder.
func countHolder(results []wire.Result, token string) int {
	n := 0
	for _, res := range results {
		if res.Status == wire.StatusHeld && res.Value == token {
			n++
		}
	}
	return n
}

// lookEnded ends a look at the queue once w is first on a majority with the
// key free, or once it cannot be and no node has it first with the key
// free; a look that some node has it first on waits for every answer (or
// the node timeout), to count them. Ending every look at a decision would
// miss a release under way half the time; waiting for every node on every
// look would hold each up by a hung node's timeout.
func lookEnded(t tally) bool { return t.won() || t.lost() && t.ok == 0 }

// uncut drops a cut left by a wake that came while no look of w's was in
// flight: the wake itself is in w.wake, for the sleep after this look.
func (w *waiter) uncut() {
	select {
	case <-w.cut: // nil for all but sets: never ready
	default:
	}
}

// unwake takes the wake that cut w's look, and reports whether there was
// one: the look is then moot (the release it would have seen reached a
// majority, and the set is first on every key it waited for), and the
// set attempts at once, where it would have waited for the look's slower
// nodes and then found the wake in its sleep (docs/design.md, "A set's
// look cut short").
func (w *waiter) unwake() bool {
	select {
	case <-w.wake:
		return true
	default:
		return false
	}
}
