package redlock

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeEntry struct {
	value   string
	expires time.Time // zero: no TTL
}

// fakeNode implements node with the semantics of the Lua scripts in node.go,
// plus fault injection. Keys expire on time.Now: run a test inside
// synctest.Test and time.Sleep moves every fake node's clock with the
// library's timers, in virtual time.
type fakeNode struct {
	id    string
	index int

	mu      sync.Mutex
	keys    map[string]fakeEntry
	err     error         // every call fails with it
	gate    chan struct{} // calls wait for it to close, ignoring ctx like go-redis without ContextTimeoutEnabled
	delay   time.Duration // every call takes this long, ignoring ctx: a slow node
	acqGate chan struct{} // acquires (only) wait for it to close
	amnesia bool          // forgets lock keys at once: grants to everyone (timing assumptions broken)
	runID   string        // as INFO server reports it
	fenceMu sync.Mutex    // fenced ops are atomic, as scripts are

	calls       atomic.Int32
	releaseErrs []error // ctx.Err() seen by each release call
	extends     atomic.Int32
	noNotices   bool // releases and proclaims publish nothing
	// hold, if set, is called before every op, and may block it: a test
	// builds its schedule with it. Set it before the node is used.
	hold func(o *op)
	// lenientWriteBack acknowledges fence write-backs whatever token holds
	// the key, as the write-back did before 2026-11-23: for the canary that
	// shows why it must not.
	lenientWriteBack bool
	watchers         map[int]fakeWatcher
	nextWatcher      int
	queues           map[string]map[string]fakePlace // wait queues by lock key, by waiter ID
	readers          map[string]map[string]time.Time // a read-write lock's readers by lock key: token → lease end
}

// fakePlace is a waiter's entry in a fake wait queue.
type fakePlace struct {
	ticket int64
	until  time.Time
}

// head is queueLua's head: it drops lapsed entries from the front of key's
// queue and returns the first live one and its lease left. Callers hold n.mu.
func (n *fakeNode) head(key string) (string, time.Duration) {
	for {
		best, bp := "", fakePlace{}
		for id, p := range n.queues[key] {
			if best == "" || p.ticket < bp.ticket || p.ticket == bp.ticket && id < best {
				best, bp = id, p
			}
		}
		if best == "" {
			return "", 0
		}
		if left := bp.until.Sub(time.Now()); left > 0 {
			return best, left.Truncate(time.Millisecond)
		}
		delete(n.queues[key], best)
	}
}

// enqueue is queueLua's enqueue; callers hold n.mu.
func (n *fakeNode) enqueue(key string, p *place) {
	if n.queues == nil {
		n.queues = map[string]map[string]fakePlace{}
	}
	if n.queues[key] == nil {
		n.queues[key] = map[string]fakePlace{}
	}
	n.queues[key][p.id] = fakePlace{ticket: p.ticket, until: time.Now().Add(p.lease)}
}

// queueGate is gateLua's gate: nil when a free key may be granted to p (nil: a
// caller not queued), else the queue's refusal. Callers hold n.mu.
func (n *fakeNode) queueGate(key string, p *place) *result {
	if p != nil {
		n.enqueue(key, p)
	}
	h, left := n.head(key)
	switch {
	case h == "":
		return nil
	case p == nil || h != p.id:
		return &result{status: statusQueued, head: h, pttl: left}
	}
	delete(n.queues[key], h)
	return nil
}

// queue is queueSrc: join, refresh or (quiet) leave, and report.
func (n *fakeNode) queue(o *op) result {
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	first, _ := n.head(o.key)
	if o.quiet {
		delete(n.queues[o.key], o.place.id)
	} else {
		n.enqueue(o.key, o.place)
	}
	h, left := n.head(o.key)
	e, held := n.get(o.key)
	readers := n.readersLeft(o.key)
	n.mu.Unlock()
	res := result{status: statusAbsent, head: h, pttl: left}
	switch {
	case held && e.expires.IsZero():
		res.status, res.pttl = statusHeld, -1
	case held:
		res.status, res.pttl = statusHeld, e.expires.Sub(time.Now())
	case readers > 0:
		res.status, res.pttl = statusHeld, readers
	}
	if o.quiet && first == o.place.id && h != "" && !held {
		n.wake(o.wake.(string), o.key, o.place.id, h)
	}
	return res
}

// fakeWatcher is one subscription to a fake node's channel.
type fakeWatcher struct {
	channel string
	deliver func(channel, payload string)
}

func (n *fakeNode) watch(channel string, deliver func(channel, payload string), ready func()) (stop func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer ready()
	if n.watchers == nil {
		n.watchers = make(map[int]fakeWatcher)
	}
	id := n.nextWatcher
	n.nextWatcher++
	n.watchers[id] = fakeWatcher{channel, deliver}
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		delete(n.watchers, id)
	}
}

// wake does what queueLua's wake does: it tells the Client of waiter id,
// through its wake channel, that id is first and key free since token's
// release; callers must not hold n.mu.
func (n *fakeNode) wake(prefix, key, token, id string) {
	client, _, _ := strings.Cut(id, ".")
	n.publish(prefix+client, key+"\x00"+token+"\x00"+id)
}

// publish delivers payload to the node's watchers of channel; callers must
// not hold n.mu.
func (n *fakeNode) publish(channel, payload string) {
	if n.noNotices {
		return
	}
	n.mu.Lock()
	var ws []func(channel, payload string)
	for _, w := range n.watchers {
		if w.channel == channel {
			ws = append(ws, w.deliver)
		}
	}
	n.mu.Unlock()
	for _, w := range ws {
		w(channel, payload)
	}
}

var _ node = (*fakeNode)(nil)

func newFakeNodes(n int) []*fakeNode {
	nodes := make([]*fakeNode, n)
	for i := range nodes {
		nodes[i] = &fakeNode{id: fmt.Sprintf("fake%d", i), index: i, keys: map[string]fakeEntry{}, runID: fmt.Sprintf("fake%d-run0", i)}
	}
	return nodes
}

func (n *fakeNode) name() string { return n.id }

// start runs the call on a goroutine of its own: the fake's calls block
// (gates, delays) the way a node's replies can be slow to come.
// fakeYield, with -fakeyield, has each fake node's call yield the
// processor a random number of times (up to 3,000) before it runs: the
// schedules of a loaded machine, where a round's last node answers after
// the call that waited for a majority has returned. A test that reads the
// nodes right after such a call without synctest.Wait fails under it; one
// did only beside a CPU hog, once in some thousand runs, before the flag.
// Virtual time does not move while a call is runnable, so timings hold.
var fakeYield = flag.Bool("fakeyield", false, "fake nodes yield a random number of times before each call (slow: about 15x)")

func (n *fakeNode) start(c call) {
	go func() {
		base := c.ctx
		if c.detached { // as the stream: sent whatever becomes of c.ctx (fakes read no values)
			base = context.Background()
		}
		ctx, cancel := context.WithDeadline(base, c.deadline)
		defer cancel()
		if *fakeYield {
			for range rand.IntN(3000) {
				runtime.Gosched()
			}
		}
		c.r.deliver(c.i, n.do(ctx, c.o))
	}()
}

// enter waits for the gate and the node's delay, and returns the injected
// error, if any.
func (n *fakeNode) enter() error {
	n.calls.Add(1)
	n.mu.Lock()
	gate, err, delay := n.gate, n.err, n.delay
	n.mu.Unlock()
	if gate != nil {
		<-gate
	}
	time.Sleep(delay)
	return err
}

func (n *fakeNode) setGate(g chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gate = g
}

func (n *fakeNode) setErr(err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.err = err
}

// get returns the live entry at key; callers hold n.mu.
func (n *fakeNode) get(key string) (fakeEntry, bool) {
	e, ok := n.keys[key]
	if ok && !e.expires.IsZero() && !time.Now().Before(e.expires) {
		delete(n.keys, key)
		return e, false
	}
	return e, ok
}

func owns(value, token string) bool {
	return value == token || strings.HasPrefix(value, token+"\x00")
}

// set stores value at key with the given TTL (no TTL when ttl < 0).
func (n *fakeNode) set(key, value string, ttl time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e := fakeEntry{value: value}
	if ttl >= 0 {
		e.expires = time.Now().Add(ttl)
	}
	n.keys[key] = e
}

func (n *fakeNode) releases() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.releaseErrs)
}

func (n *fakeNode) value(key string) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.get(key)
	return e.value, ok
}

func (n *fakeNode) do(ctx context.Context, o *op) result {
	if n.hold != nil {
		n.hold(o)
	}
	if o.keys != nil {
		return n.multi(ctx, o)
	}
	if o.mode == modeRead && o.kind != opInspect && o.kind != opQueue {
		return n.read(ctx, o)
	}
	switch o.kind {
	case opAcquire:
		return n.reportRunID(o, n.acquire(o.key, o.token, o.value, o.ttl, o.place, o.mode == modeWrite))
	case opAcquireFenced:
		return n.reportRunID(o, n.acquireFenced(o.key, o.token, o.value, o.ttl, o.fence, o.place, o.mode == modeWrite))
	case opQueue:
		return n.queue(o)
	case opFenceWrite:
		return n.fenceWrite(o.key, o.token, o.fence)
	case opExtend:
		return n.extend(o.key, o.token, o.ttl)
	case opProclaim:
		return n.proclaim(o.key, o.token, o.value, o.fence)
	case opRelease:
		wake, _ := o.wake.(string)
		return n.release(ctx, o.key, o.token, o.ttl, wake)
	}
	return n.inspect(o.key)
}

// reportRunID does what a stream does: it adds the node's run_id to an
// acquire result.
func (n *fakeNode) reportRunID(_ *op, res result) result {
	n.mu.Lock()
	res.runID = n.runID
	n.mu.Unlock()
	return res
}

// restart makes the node a new process that kept nothing: a new run_id and
// no keys, as a restart without persistence.
func (n *fakeNode) restart() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.runID = fmt.Sprintf("%s-run%d", n.id, n.calls.Load())
	n.keys = map[string]fakeEntry{}
}

// acquireFenced is acquireFencedSrc: acquire, and on a grant set the fence
// counter to the proposal when that is larger, or else advance it to the
// next value ≡ the node's index (mod 64).
func (n *fakeNode) acquireFenced(key, token, value string, ttl time.Duration, proposal int64, p *place, write bool) result {
	n.fenceMu.Lock() // one script at a time, like Redis
	defer n.fenceMu.Unlock()
	n.mu.Lock()
	c, ok := n.counter(fenceKey(key))
	n.mu.Unlock()
	if !ok {
		if err := n.enter(); err != nil {
			return result{err: err}
		}
		return result{err: errors.New("FENCE redlock: fence counter is not a whole number")}
	}
	f := proposal
	if f <= c {
		f = c + ((int64(n.index)-c-1)%fenceModulus+fenceModulus)%fenceModulus + 1
	}
	if f >= maxFence {
		if err := n.enter(); err != nil {
			return result{err: err}
		}
		return result{err: errors.New("FENCE redlock: fence counter would pass 2^53")}
	}
	res := n.acquire(key, token, value, ttl, p, write)
	if res.ok() {
		n.set(fenceKey(key), fmt.Sprint(f), -1)
		res.fence = f
	}
	return res
}

// fenceWrite is fenceWriteSrc: counter = max(counter, t), acknowledged
// where no other token holds the key and the counter was below t, or equal
// to it with our key there.
func (n *fakeNode) fenceWrite(key, token string, t int64) result {
	n.fenceMu.Lock()
	defer n.fenceMu.Unlock()
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e, held := n.get(key)
	ours := held && owns(e.value, token)
	if n.lenientWriteBack {
		held, ours = false, true
	}
	if held && !ours {
		return result{status: statusHeld}
	}
	c, ok := n.counter(fenceKey(key))
	switch {
	case !ok:
		return result{err: errors.New("FENCE redlock: fence counter is not a whole number")}
	case c > t, c == t && !ours:
		return result{err: errLargerFence}
	}
	n.keys[fenceKey(key)] = fakeEntry{value: fmt.Sprint(t)}
	return result{status: statusOK}
}

// counter reads a fence counter (0 when absent); callers hold n.mu.
func (n *fakeNode) counter(key string) (int64, bool) {
	e, ok := n.get(key)
	if !ok {
		return 0, true
	}
	c, err := strconv.ParseInt(e.value, 10, 64)
	return c, err == nil && c >= 0
}

// acquire is acquireSrc, or for a read-write lock's writer (write)
// acquireWriteSrc: refused where the key is free but readers hold.
func (n *fakeNode) acquire(key, token, value string, ttl time.Duration, p *place, write bool) result {
	n.mu.Lock()
	gate := n.acqGate
	n.mu.Unlock()
	if gate != nil {
		<-gate
	}
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.amnesia {
		delete(n.keys, key)
	}
	e, ok := n.get(key)
	switch {
	case !ok && write && n.readersLeft(key) > 0:
		if p != nil {
			n.enqueue(key, p) // a queued writer keeps its place
		}
		return result{status: statusHeld, pttl: n.readersLeft(key), value: readersHolder}
	case !ok:
		if refused := n.queueGate(key, p); refused != nil {
			return *refused
		}
		n.keys[key] = fakeEntry{value: value, expires: time.Now().Add(ttl.Truncate(time.Millisecond))}
		return result{status: statusOK}
	case owns(e.value, token):
		n.keys[key] = fakeEntry{value: value, expires: time.Now().Add(ttl.Truncate(time.Millisecond))}
		return result{status: statusRefreshed}
	}
	if p != nil {
		n.enqueue(key, p)
	}
	holder, _, _ := strings.Cut(e.value, "\x00")
	if e.expires.IsZero() {
		return result{status: statusHeld, pttl: -1, value: holder}
	}
	return result{status: statusHeld, pttl: e.expires.Sub(time.Now()), value: holder}
}

// owned returns the live entry at key if token holds it, or else the reply
// of extend and release: absent, or held by another token. Callers hold n.mu.
func (n *fakeNode) owned(key, token string) (fakeEntry, result, bool) {
	e, ok := n.get(key)
	switch {
	case !ok:
		return e, result{status: statusAbsent}, false
	case !owns(e.value, token):
		return e, result{status: statusHeld}, false
	}
	return e, result{status: statusOK}, true
}

func (n *fakeNode) extend(key, token string, ttl time.Duration) result {
	n.extends.Add(1)
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e, res, mine := n.owned(key, token)
	if mine {
		e.expires = time.Now().Add(ttl.Truncate(time.Millisecond))
		n.keys[key] = e
	}
	return res
}

// proclaim is proclaimSrc: replace the value of a key we hold, keeping its
// TTL, and announce it on the key's leader channel.
func (n *fakeNode) proclaim(key, token, value string, term int64) result {
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	e, res, mine := n.owned(key, token)
	if mine {
		e.value = value
		n.keys[key] = e
	}
	n.mu.Unlock()
	if mine {
		n.publish(key+":leader", strconv.FormatInt(term, 10))
	}
	return res
}

func (n *fakeNode) release(ctx context.Context, key, token string, cooldown time.Duration, wake string) result {
	n.mu.Lock()
	n.releaseErrs = append(n.releaseErrs, ctx.Err())
	n.mu.Unlock()
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	e, res, mine := n.owned(key, token)
	switch {
	case !mine:
	case cooldown == 0:
		delete(n.keys, key)
	default:
		e.expires = time.Now().Add(cooldown)
		n.keys[key] = e
	}
	if mine && cooldown == 0 && wake != "" {
		res.head, _ = n.head(key)
	}
	n.mu.Unlock()
	if res.head != "" {
		n.wake(wake, key, token, res.head)
	}
	return res
}

func (n *fakeNode) inspect(key string) result {
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	fence, _ := n.counter(fenceKey(key))
	first, _ := n.head(key) // drops lapsed places from the front: invisible to callers
	res := result{status: statusAbsent, fence: fence, head: first}
	for _, until := range n.readers[key] {
		if until.After(time.Now()) {
			res.readers++
		}
	}
	for _, p := range n.queues[key] {
		if p.until.After(time.Now()) {
			res.waiting++
		}
	}
	e, ok := n.get(key)
	switch {
	case !ok:
	case e.expires.IsZero():
		res.status, res.pttl, res.value = statusHeld, -1, e.value
	default:
		res.status, res.pttl, res.value = statusHeld, e.expires.Sub(time.Now()), e.value
	}
	return res
}

var errFakeDown = errors.New("fake: connection refused")

// newTestClient builds a Client over fake nodes, and closes it when the test
// ends.
func newTestClient(t testing.TB, fakes []*fakeNode, opts ...Option) *Client {
	t.Helper()
	nodes := make([]node, len(fakes))
	for i, f := range fakes {
		nodes[i] = f
	}
	// A generous node timeout: fakes answer at once, but a loaded 2-core
	// machine can delay any goroutine by milliseconds. Tests about node
	// timeouts pass their own, which comes later and wins.
	c, err := newClient(nodes, append([]Option{WithAnyNodeCount(), WithNodeTimeout(5 * time.Second)}, opts...))
	if err != nil {
		t.Fatalf("newClient: %v", err)
	}
	t.Cleanup(func() {
		// Tests that break nodes leave locks whose release fails; Close's
		// own behaviour is tested in TestClose.
		_ = c.Close(context.Background())
	})
	return c
}

// multi runs an op on a multi-key lock's keys (o.keys) with the semantics
// of its script: acquireMultiSrc and acquireMultiFencedSrc (every key or
// none), extendSrc, releaseSrc and fenceWriteSrc over several keys.
func (n *fakeNode) multi(ctx context.Context, o *op) result {
	acquire := o.kind == opAcquire || o.kind == opAcquireFenced
	if acquire {
		n.mu.Lock()
		gate := n.acqGate
		n.mu.Unlock()
		if gate != nil {
			<-gate
		}
	}
	if o.kind == opRelease {
		n.mu.Lock()
		n.releaseErrs = append(n.releaseErrs, ctx.Err())
		n.mu.Unlock()
	}
	if o.kind == opExtend {
		n.extends.Add(1)
	}
	n.fenceMu.Lock()
	defer n.fenceMu.Unlock()
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	// Every key's state first, as the scripts read before they write.
	own, absent := 0, 0
	var other *result
	for _, k := range o.keys {
		e, ok := n.get(k)
		switch {
		case !ok:
			absent++
		case owns(e.value, o.token):
			own++
		case other == nil:
			holder, _, _ := strings.Cut(e.value, "\x00")
			other = &result{status: statusHeld, pttl: -1, value: holder}
			if !e.expires.IsZero() {
				other.pttl = e.expires.Sub(time.Now())
			}
		}
	}
	expires := time.Now().Add(o.ttl.Truncate(time.Millisecond))
	var res result
	var wake []string // keys released, to wake their queues' first waiters
	switch o.kind {
	case opAcquire, opAcquireFenced:
		if other != nil {
			res = *other
			break
		}
		res.status, res.runID = statusOK, n.runID
		if own == len(o.keys) {
			res.status = statusRefreshed
		}
		if o.kind == opAcquireFenced {
			var c int64
			for _, k := range o.keys {
				ck, ok := n.counter(fenceKey(k))
				if !ok {
					n.mu.Unlock()
					return result{err: errors.New("FENCE redlock: fence counter is not a whole number")}
				}
				c = max(c, ck)
			}
			f := o.fence
			if f <= c {
				f = c + ((int64(n.index)-c-1)%fenceModulus+fenceModulus)%fenceModulus + 1
			}
			for _, k := range o.keys {
				n.keys[fenceKey(k)] = fakeEntry{value: fmt.Sprint(f)}
			}
			res.fence = f
		}
		for _, k := range o.keys {
			n.keys[k] = fakeEntry{value: o.value, expires: expires}
		}
	case opExtend:
		switch {
		case other != nil:
			res.status = statusHeld
		case absent > 0:
			res.status = statusAbsent
		default:
			res.status = statusOK
			for _, k := range o.keys {
				e, _ := n.get(k)
				e.expires = expires
				n.keys[k] = e
			}
		}
	case opRelease:
		res.status = statusOK
		switch {
		case other != nil:
			res.status = statusHeld
		case absent > 0:
			res.status = statusAbsent
		}
		for _, k := range o.keys {
			e, ok := n.get(k)
			switch {
			case !ok || !owns(e.value, o.token):
			case o.ttl > 0:
				e.expires = time.Now().Add(o.ttl)
				n.keys[k] = e
			default:
				delete(n.keys, k)
				wake = append(wake, k)
			}
		}
	case opFenceWrite:
		ours := absent == 0 && other == nil
		if other != nil {
			res.status = statusHeld
			break
		}
		res.status = statusOK
		for _, k := range o.keys {
			c, ok := n.counter(fenceKey(k))
			switch {
			case !ok:
				res = result{err: errors.New("FENCE redlock: fence counter is not a whole number")}
			case c > o.fence, c == o.fence && !ours:
				res = result{err: errLargerFence}
			}
		}
		if res.status == statusOK {
			for _, k := range o.keys {
				if c, _ := n.counter(fenceKey(k)); c < o.fence {
					n.keys[fenceKey(k)] = fakeEntry{value: fmt.Sprint(o.fence)}
				}
			}
		}
	}
	heads := make(map[string]string)
	if prefix, _ := o.wake.(string); prefix != "" {
		for _, k := range wake {
			if h, _ := n.head(k); h != "" {
				heads[k] = h
			}
		}
	}
	n.mu.Unlock()
	for k, h := range heads {
		n.wake(o.wake.(string), k, o.token, h)
	}
	return res
}

// readersLeft is readersLua's readers: the live readers' longest lease
// left, 0 if none; it drops lapsed readers. Callers hold n.mu.
func (n *fakeNode) readersLeft(key string) time.Duration {
	var left time.Duration
	for tok, until := range n.readers[key] {
		if d := until.Sub(time.Now()); d > 0 {
			left = max(left, d)
		} else {
			delete(n.readers[key], tok)
		}
	}
	return left
}

// read runs a reader's op with the semantics of readAcquireSrc,
// readExtendSrc and readReleaseSrc.
func (n *fakeNode) read(ctx context.Context, o *op) result {
	if o.kind == opRelease {
		n.mu.Lock()
		n.releaseErrs = append(n.releaseErrs, ctx.Err())
		n.mu.Unlock()
	}
	if err := n.enter(); err != nil {
		return result{err: err}
	}
	n.mu.Lock()
	now := time.Now()
	n.readersLeft(o.key) // drops lapsed readers
	if n.readers == nil {
		n.readers = map[string]map[string]time.Time{}
	}
	rs := n.readers[o.key]
	if rs == nil {
		rs = map[string]time.Time{}
		n.readers[o.key] = rs
	}
	_, mine := rs[o.token]
	ttl := o.ttl.Truncate(time.Millisecond)
	var res result
	var wake string
	switch o.kind {
	case opAcquire:
		e, held := n.get(o.key)
		h, left := n.head(o.key)
		switch {
		case held:
			holder, _, _ := strings.Cut(e.value, "\x00")
			res = result{status: statusHeld, pttl: e.expires.Sub(now), value: holder}
		case !mine && h != "":
			res = result{status: statusQueued, head: h, pttl: left}
		default:
			rs[o.token] = now.Add(ttl)
			res = result{status: statusOK, runID: n.runID}
			if mine {
				res.status = statusRefreshed
			}
		}
	case opExtend:
		res.status = statusAbsent
		if mine {
			rs[o.token], res.status = now.Add(ttl), statusOK
		}
	case opRelease:
		res.status = statusAbsent
		switch {
		case !mine:
		case ttl > 0:
			rs[o.token], res.status = now.Add(ttl), statusOK
		default:
			delete(rs, o.token)
			res.status = statusOK
			if _, held := n.get(o.key); !held && len(rs) == 0 && o.wake != nil {
				res.head, _ = n.head(o.key)
				wake, _ = o.wake.(string)
			}
		}
	}
	n.mu.Unlock()
	if res.head != "" && wake != "" {
		n.wake(wake, o.key, readersLeft, res.head)
	}
	return res
}
