package nodeio

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file is one node's command stream: how a node's ops (internal/wire) leave
// for the node. The commands that concurrent rounds send to one node leave
// in pipelined writes, in the order they were queued, and the replies are
// matched back by position. A writer goroutine (a lane, lane.go) has one
// pipeline in flight at a time, on a connection of its own; a batch is
// whatever queued while the lanes were busy, so a lone call leaves at once,
// with no added delay, and calls that arrive together share one write and
// one read system call on each side.
//
// The first lane sends whatever is queued whenever it has no batch out.
// On a far node (one whose batches all took laneAfter or longer lately:
// far), once its batch has been out laneAfter (1 ms), another lane sends
// what has queued since, up to maxLanes batches out, so that a call waits
// a millisecond for the batch ahead of it and not its round trip; but none
// while the oldest batch out is past its calls' deadlines (a node that
// hangs gets no more calls than it has). A lane other than the first is
// opened only then, and readies its connection before it takes any call
// (lane.ready: a round trip on it, bounded by laneReady), so that no call
// pays a dial or a handshake inside its deadline, and a lane opened to a
// node that answers nothing never carries one; it ends when its
// connection does (broken, or streamConnAge old). Redis keeps one
// connection's order, not two connections' relative order, so the order
// kept is each key's (keyorder.go): a call leaves only when no call queued
// before it that shares a key (its Op.Key or one of its Op.Keys) is out on
// another lane or still queued. One lock's calls share its key, so a
// release can never overtake that node's acquire, nor a leave its place
// (docs/design.md, "Node streams"; the simulator's -sim.perkey checks the
// protocol under that order).
//
// Nothing is sent twice: every command is marked no-retry (see noRetry),
// and go-redis does not retry a pipeline that holds one. A call whose
// deadline passed while it was queued (behind a node that hangs), or whose
// context ended unless the call is detached (acquire, extend and release
// calls are: see request.detach), is dropped, not sent: it is answered
// with ErrNotSent and can have left nothing on the node.

// streamIdle is how long an idle writer waits for more calls before it
// ends (and gives its connection back to the go-redis pool). A writer
// started again takes a connection again and asks its run_id again (in
// the batch): with nodes at WAN distances (make bench), that made the
// first Lock after each idle spell of over a second 3–4 ms slower at p99;
// 5 s keeps a service that locks every few seconds on warm writers.
const streamIdle = 5 * time.Second

// streamConnAge is how long a stream keeps one connection before it gives
// it back to the go-redis pool and takes one again (and so asks the run_id
// again). go-redis peeks at the socket of a connection that has been out of
// its pool for 5 s before and after every use, at 3 allocations a peek;
// a connection handed back and taken again within that is not peeked.
const streamConnAge = 4 * time.Second

// stream is one node's ordered, batched command stream.
type stream struct {
	client redis.UniversalClient
	index  int  // the node's index, for the fenced acquire's residue
	guard  bool // learn each connection's run_id for the restart guard
	// ctxTimeout: the client has ContextTimeoutEnabled, so a batch's
	// context deadline bounds its reads.
	ctxTimeout bool
	// redirect, for the stream of a Cluster's shard, is the ClusterClient:
	// a call the shard answers MOVED or ASK (it did not run it) is sent
	// again through it, which follows the redirection.
	redirect *redis.ClusterClient
	done     <-chan struct{}
	spawn    func(func()) // the Client's: writers end before Close returns
	maxLanes int          // how many lanes may have a batch out at once

	// What the lanes know of the node. dialed: a lane has had a
	// connection, so no more pings first (see prepare). infoWorks: the
	// node answered INFO server with a run_id before, so a lane asks it
	// again in the pipeline of the batch that needs it (its own
	// connection's run_id). scriptsRun: a script of the library ran on a
	// lane's connection since one was last given back, so plain acquires
	// go as plain commands; until then, as their Scripted twins, so that a
	// node that refuses scripts refuses the acquire (and is unusable at
	// once) rather than grant a lock no script can release.
	dialed, infoWorks, scriptsRun atomic.Bool
	// held: the scripts (by wire's ScriptIndex) the node is known to
	// hold in its script cache; the others go as EVAL (see forgetScripts).
	held [wire.ScriptCount]atomic.Bool

	mu      sync.Mutex
	queue   []Call
	lanes   int           // writer goroutines running
	out     []*lane       // the lanes with a batch out
	pruneAt int           // the queue length at which enqueue prunes ended calls
	wake    chan struct{} // tells the first lane, waiting, that calls are queued
	// wakeMore tells another waiting lane: it sends only while batches
	// have been out laneAfter.
	wakeMore chan struct{}
	first    bool // the first lane is running (counted in lanes)
	// firstSent: when the first lane's batch out was taken; zero when it
	// has none out. idleMore: the other lanes waiting for calls.
	// moreTimer wakes one of those once the first lane's batch has been
	// out laneAfter.
	firstSent time.Time
	idleMore  int
	moreTimer *time.Timer
	moreArmed bool // moreTimer is set for the first lane's batch out
	// readying: a lane opened is readying its connection (counted in
	// lanes); readyFailed: when the last one failed to, after which none
	// is opened for laneRetry.
	readying    bool
	readyFailed time.Time
	// The node's round trip, as the shortest a batch took in the current
	// rttWindow and in the one before (see far).
	rttCur, rttPrev time.Duration
	rttSince        time.Time // when the current window began
}

func newStream(client redis.UniversalClient, index int) *stream {
	s := &stream{client: client, index: index, wake: make(chan struct{}, 1), wakeMore: make(chan struct{}, 1), pruneAt: minPrune, maxLanes: 1, rttPrev: time.Hour}
	if cl, ok := client.(*redis.Client); ok { // a Cluster's shards are *redis.Client too
		s.ctxTimeout = cl.Options().ContextTimeoutEnabled
		if s.ctxTimeout || cl.Options().ReadTimeout > 0 {
			s.maxLanes = min(max(cl.Options().PoolSize/4, 1), maxLanes)
		}
	}
	return s
}

// maxLanes bounds a stream's lanes: each holds a connection of the
// go-redis client's pool, of which the stream takes at most a quarter
// (the rest stays for the client's other users). 8 lanes, as many as 8
// callers on far nodes use (docs/design.md, "Lanes"), need a pool of 32:
// go-redis's default on 4 CPUs or more. A
// client whose reads nothing bounds (ReadTimeout -1 or -2 without
// ContextTimeoutEnabled) has one lane: a lane readying its connection to
// a node that hangs would wait for it without end, and Close with it.
const maxLanes = 8

// laneReady bounds a lane's readying (lane.ready), as do the deadlines
// of the calls queued when it was opened: it is of no use to them later.
// laneRetry is how long a stream whose lane failed to ready opens no
// other.
const (
	laneReady = time.Second
	laneRetry = time.Second
)

// bind ties the stream to its Client: writers end once done is closed and
// their queue is empty, and spawn runs them (the Client counts them).
func (s *stream) bind(done <-chan struct{}, spawn func(func()), guard bool) {
	s.done, s.spawn, s.guard = done, spawn, guard
}

// enqueue queues calls and makes sure a writer will send them. Calls
// queued together leave in one batch.
func (s *stream) enqueue(calls ...Call) {
	s.mu.Lock()
	ended := s.prune()
	s.queue = append(s.queue, calls...)
	start, more := false, false
	switch {
	case !s.first:
		s.first, start = true, true
		s.lanes++
	case s.firstSent.IsZero() || s.maxLanes == 1 || !s.far(): // the first lane takes the calls
	case s.moreArmed: // another lane is woken or opened once the first's batch is out that long
	default:
		if wait := laneAfter - time.Since(s.firstSent); wait <= 0 {
			more = s.more()
		} else {
			if s.moreTimer == nil {
				s.moreTimer = time.AfterFunc(time.Hour, s.wakeMoreLane)
			}
			s.moreTimer.Reset(wait)
			s.moreArmed = true
		}
	}
	s.mu.Unlock()
	for i := range ended {
		ended[i].To.Deliver(ended[i].Index, wire.Result{Err: ended[i].NotSent()})
	}
	if start {
		s.spawn(func() { s.write(true, time.Time{}) })
	}
	signal(s.wake)
	if more {
		signal(s.wakeMore)
	}
}

// wakeMoreLane is moreTimer's: the first lane's batch has been out
// laneAfter.
func (s *stream) wakeMoreLane() {
	s.mu.Lock()
	s.moreArmed = false
	more := len(s.queue) > 0 && s.more()
	s.mu.Unlock()
	if more {
		signal(s.wakeMore)
	}
}

// far reports whether the node is far: every batch it answered in the
// last rttWindow or two took laneAfter or longer. Only a far node's calls
// go on lanes beside the first. A near node's batch that is out laneAfter
// waits for the client's CPU (a busy machine, a GC pause), which another
// lane would not make sooner: it would only split the batches, and each
// cycle would cost the client and the nodes more (make bench's section 2
// with lanes for every node: throughput −17% at 32 goroutines, the
// servers' CPU per cycle +25%). Callers hold s.mu.
func (s *stream) far() bool {
	return min(s.rttCur, s.rttPrev) >= laneAfter
}

// rttWindow is how long a stream's shortest round trip stands for the
// node's (far): long enough to hold batches that the client's CPU did
// not delay, short enough that a node that moves away is seen to.
const rttWindow = time.Second

// sample records how long a batch was out (callers hold s.mu).
func (s *stream) sample(rtt time.Duration, now time.Time) {
	if now.Sub(s.rttSince) >= rttWindow {
		s.rttPrev, s.rttCur, s.rttSince = s.rttCur, rtt, now
		if s.rttPrev == 0 {
			s.rttPrev = time.Hour // the first window: only its own batches count
		}
		return
	}
	s.rttCur = min(s.rttCur, rtt)
}

// more is called when calls are queued and the first lane's batch has
// been out laneAfter: it reports whether a lane other than the first
// waits for calls, to be woken; if none does, it opens one, when it may
// (not beyond maxLanes, nor for a near node, nor before the stream's
// first connection, nor while one readies, after a lane failed to ready,
// or while the oldest batch out is past its calls' deadlines: the node
// hangs, likely). Callers hold s.mu. A lane is opened
// only while one has a batch out, so that the Client's Close, which waits
// for the lanes, is still waiting for that one when this one is counted.
func (s *stream) more() bool {
	switch {
	case s.idleMore > 0:
		return true
	case len(s.out) == 0, s.readying, s.lanes >= s.maxLanes,
		// A connection was readied on the client first (and, with the
		// restart guard, the run_id learnt on the first lane): go-redis
		// v9.23 writes its options' MaintNotificationsConfig.Mode during
		// a client's first handshake, under a lock that a Conn taken from
		// the client does not share, so two first handshakes at once race
		// (the race detector found it in TestClusterNode).
		!s.dialed.Load(), s.guard && !s.infoWorks.Load(), !s.far(),
		time.Since(s.readyFailed) < laneRetry, time.Now().After(s.out[0].until):
		return false
	}
	s.readying = true
	s.lanes++
	until := time.Now().Add(laneReady)
	if d := latestDeadline(s.queue); d.Before(until) {
		until = d
	}
	s.spawn(func() { s.write(false, until) })
	return false
}

// prune takes the calls that ended out of a queue that has grown past
// pruneAt, and returns them for answering. A writer stuck on a node that
// does not answer (frozen, partitioned, with go-redis's read timeout
// turned off) would otherwise keep every call queued behind it, and the
// rounds they belong to, for as long as it is stuck. Pruning only when the
// queue has doubled keeps the cost of an enqueue constant on average.
// Callers hold s.mu.
func (s *stream) prune() []Call {
	if len(s.queue) < s.pruneAt {
		return nil
	}
	var ended []Call
	live, now := s.queue[:0], time.Now()
	for _, c := range s.queue {
		if c.EndedAt(now) {
			ended = append(ended, c)
		} else {
			live = append(live, c)
		}
	}
	clear(s.queue[len(live):])
	s.queue = live
	s.pruneAt = max(minPrune, 2*len(live))
	return ended
}

// minPrune is the queue length below which a stream does not prune.
const minPrune = 64

// write is a writer goroutine, a lane: it sends batches until the stream
// has been idle for streamIdle, or the Client is closed and nothing is
// queued.
func (s *stream) write(first bool, readyBy time.Time) {
	l := &lane{s: s, first: first}
	wake := s.wake
	if !first {
		wake = s.wakeMore
		if !s.readyLane(l, readyBy) {
			return
		}
	}
	idle, later := time.NewTimer(l.idleFor()), time.NewTimer(time.Hour)
	defer idle.Stop()
	defer later.Stop()
	for {
		if !first && !l.live() {
			l.hangUp()
			s.quit(l)
			return
		}
		// Yield first: the callers this lane just woke send their next
		// calls at once, and those then leave in this batch (design.md).
		runtime.Gosched()
		batch, wait := s.take(l)
		if batch != nil {
			l.send(batch)
			s.finish(l, batch)
			idle.Reset(l.idleFor())
			continue
		}
		var retry <-chan time.Time
		if wait > 0 {
			later.Reset(wait)
			retry = later.C
		}
		s.idleLane(l, 1)
		var woken bool
		select {
		case <-wake:
			woken = true
		case <-retry:
			woken = true
		case <-idle.C:
		case <-s.done:
		}
		s.idleLane(l, -1)
		if woken {
			continue
		}
		l.hangUp() // before quit: a writer started after it has its own
		if s.quit(l) {
			return
		}
	}
}

// readyLane readies lane l, just opened (see more), by the time given, and reports whether
// it may take calls; a lane that could not ready ends, and no other is
// opened for laneRetry.
func (s *stream) readyLane(l *lane, by time.Time) bool {
	err := l.ready(by)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readying = false
	if err != nil {
		s.readyFailed = time.Now()
		s.lanes--
	}
	return err == nil
}

// idleLane counts lane l in (d = 1) or out of (d = −1) the lanes other
// than the first that wait for calls.
func (s *stream) idleLane(l *lane, d int) {
	if l.first {
		return
	}
	s.mu.Lock()
	s.idleMore += d
	s.mu.Unlock()
}

// quit ends the writer unless calls were queued meanwhile.
func (s *stream) quit(l *lane) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.first && len(s.queue) > 0 {
		return false
	}
	s.lanes--
	if l.first {
		s.first = false
	}
	return true
}
