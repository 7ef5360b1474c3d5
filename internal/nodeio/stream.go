package nodeio

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file is one node's command stream: how a node's ops (internal/wire) leave
// for the node. The commands that concurrent rounds send to one node leave
// in one pipelined write, in the order they were queued, and the replies
// are matched back by position. One writer goroutine per node has one
// pipeline in flight at a time; a batch is whatever queued while the
// previous one was in flight, so a lone call leaves at once, with no added
// delay, and calls that arrive together share one write and one read system
// call on each side. Because one node's commands leave in queue order on one
// connection, a release can never overtake that node's acquire.
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
	// context deadline bounds its reads; bctx is that context.
	ctxTimeout bool
	bctx       batchContext
	// redirect, for the stream of a Cluster's shard, is the ClusterClient:
	// a call the shard answers MOVED or ASK (it did not run it) is sent
	// again through it, which follows the redirection.
	redirect *redis.ClusterClient
	done     <-chan struct{}
	spawn    func(func()) // the Client's: writers end before Close returns

	mu      sync.Mutex
	queue   []Call
	spare   []Call        // the last batch's slice, for reuse
	running bool          // a writer goroutine exists
	pruneAt int           // the queue length at which enqueue prunes ended calls
	wake    chan struct{} // tells a waiting writer that calls are queued

	// The writer's own state.
	conn   *redis.Conn // the stream's own connection (standalone, Sentinel, a Cluster's shard); nil until needed
	connAt time.Time   // when conn was taken
	dialed bool        // the stream has had a connection: no more pings first
	// infoWorks: the node answered INFO server with a run_id before, so it
	// is asked again in the pipeline of the batch that needs it (info).
	infoWorks bool
	info      *redis.StringCmd
	pipe      redis.Pipeliner // conn's pipeline, reused
	runID     string          // the run_id of the server at the other end of conn; "" not known
	// scriptsRun: a script of the library ran on conn, so plain acquires go
	// as plain commands; until then, as their Scripted twins, so that a
	// node that refuses scripts refuses the acquire (and is unusable at
	// once) rather than grant a lock no script can release.
	scriptsRun bool
	cmds       []*redis.Cmd // by position in the batch; nil for a call not sent
}

func newStream(client redis.UniversalClient, index int) *stream {
	s := &stream{client: client, index: index, wake: make(chan struct{}, 1), pruneAt: minPrune}
	if cl, ok := client.(*redis.Client); ok { // a Cluster's shards are *redis.Client too
		s.ctxTimeout = cl.Options().ContextTimeoutEnabled
	}
	return s
}

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
	start := !s.running
	s.running = true
	s.mu.Unlock()
	for i := range ended {
		ended[i].To.Deliver(ended[i].Index, wire.Result{Err: ended[i].NotSent()})
	}
	if start {
		s.spawn(s.write)
		return
	}
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
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

// write is the writer goroutine: it sends batches until the stream has been
// idle for streamIdle, or the Client is closed and nothing is queued.
func (s *stream) write() {
	idle := time.NewTimer(streamIdle)
	defer idle.Stop()
	for {
		if batch := s.take(); batch != nil {
			s.send(batch)
			s.recycle(batch)
			idle.Reset(streamIdle)
			continue
		}
		select {
		case <-s.wake:
			continue
		case <-idle.C:
		case <-s.done:
		}
		s.hangUp() // before quit: a writer started after it owns the stream
		if s.quit() {
			return
		}
	}
}

// take returns the queued calls, or nil when there are none.
func (s *stream) take() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil
	}
	batch := s.queue
	s.queue, s.spare = s.spare[:0], nil
	return batch
}

// recycle keeps a sent batch's slice for the next queue.
func (s *stream) recycle(batch []Call) {
	clear(batch)
	s.mu.Lock()
	s.spare = batch[:0]
	s.mu.Unlock()
}

// quit ends the writer unless calls were queued meanwhile.
func (s *stream) quit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) > 0 {
		return false
	}
	s.running = false
	return true
}

// hangUp gives the stream's connection back to the pool (or drops it, when
// it failed), so that the next batch starts on a fresh one.
func (s *stream) hangUp() {
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.conn, s.pipe, s.runID, s.scriptsRun = nil, nil, "", false
}

// send sends one batch as one pipeline and delivers every call's result.
func (s *stream) send(batch []Call) {
	// Each call's own deadline was checked; go-redis's timeouts bound the
	// I/O, or, for a client with ContextTimeoutEnabled, the batch's latest
	// deadline: a node that stops answering then holds the stream no
	// longer than its calls would wait.
	ctx := context.Background()
	if s.ctxTimeout {
		s.bctx.begin(latestDeadline(batch))
		defer s.bctx.end()
		ctx = &s.bctx
	}
	s.cmds = slices.Grow(s.cmds[:0], len(batch))[:len(batch)]
	defer clear(s.cmds)
	s.makeCmds(ctx, batch)
	s.run(ctx)
	s.checkInfo(ctx, batch)
	s.evalMissing(ctx, batch)
	s.redirectMoved(ctx, batch)
	broken := false
	for j, c := range batch {
		cmd := s.cmds[j]
		if cmd == nil {
			continue
		}
		switch err := cmd.Err(); {
		case err != nil && !wire.IsReply(err):
			broken = true
		case c.Op.Kind != wire.OpAcquirePlain && (err == nil || errors.Is(err, redis.Nil)):
			s.scriptsRun = true
		}
		res := wire.Decode(c.Op.Kind, cmd)
		if wire.IsAcquire(c.Op.Kind) {
			res.RunID = s.runID
		}
		c.To.Deliver(c.Index, res)
	}
	if broken && s.conn != nil {
		s.hangUp() // the next batch dials afresh and asks the run_id again
	}
}

// makeCmds makes the command of each call of the batch that is to be
// sent, in s.cmds, and answers the others at once: calls that ended, and
// every call when no connection could be had (or every acquire, when the
// restart guard cannot work on the node).
func (s *stream) makeCmds(ctx context.Context, batch []Call) {
	connErr, guardErr := s.prepare(ctx, batch)
	now := time.Now()
	for j := range batch {
		c := &batch[j]
		var err error
		switch {
		case c.EndedAt(now):
			err = c.NotSent()
		case connErr != nil:
			err = connErr
		case guardErr != nil && wire.IsAcquire(c.Op.Kind):
			err = guardErr // not sent: the node cannot be guarded
		}
		if err != nil {
			c.To.Deliver(c.Index, wire.Result{Err: err})
			continue
		}
		if !s.scriptsRun {
			c.Op = c.Op.Scripted()
		}
		s.cmds[j] = redis.NewCmd(ctx, c.Op.Args(s.index)...)
	}
}

// latestDeadline is the latest of the batch's calls' deadlines.
func latestDeadline(batch []Call) time.Time {
	var latest time.Time
	for i := range batch {
		if batch[i].Deadline.After(latest) {
			latest = batch[i].Deadline
		}
	}
	return latest
}

// run sends the commands of s.cmds: a lone one as a plain command (the same
// bytes on the wire; go-redis's pipeline costs it 3 allocations more),
// several as one pipeline.
func (s *stream) run(ctx context.Context) {
	var lone *redis.Cmd
	n := 0
	for _, cmd := range s.cmds {
		if cmd != nil {
			lone = cmd
			n++
		}
	}
	if n == 0 {
		s.info = nil // nothing to send; asked again with the next acquire
	}
	switch {
	case n == 1 && s.info == nil && s.conn != nil:
		_ = s.conn.Process(ctx, noRetry{lone})
	case n == 1 && s.info == nil:
		_ = s.client.Process(ctx, noRetry{lone})
	case n > 0:
		pipe := s.pipe
		if s.conn == nil {
			pipe = s.client.Pipeline()
		}
		if s.info != nil {
			_ = pipe.Process(ctx, s.info)
		}
		for _, cmd := range s.cmds {
			if cmd != nil {
				_ = pipe.Process(ctx, noRetry{cmd})
			}
		}
		_, _ = pipe.Exec(ctx)
	}
}
