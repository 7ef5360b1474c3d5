package nodeio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file is one node's command stream: how the scripts of node.go leave
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
	wg       *Background // the Client's: writers end before Close returns

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
	cmds      []*redis.Cmd    // by position in the batch; nil for a call not sent
}

func newStream(client redis.UniversalClient, index int) *stream {
	s := &stream{client: client, index: index, wake: make(chan struct{}, 1), pruneAt: minPrune}
	if cl, ok := client.(*redis.Client); ok { // a Cluster's shards are *redis.Client too
		s.ctxTimeout = cl.Options().ContextTimeoutEnabled
	}
	return s
}

// bind ties the stream to its Client: writers end once done is closed and
// their queue is empty, and wg tracks them.
func (s *stream) bind(done <-chan struct{}, wg *Background, guard bool) {
	s.done, s.wg, s.guard = done, wg, guard
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
		s.wg.Add(1)
		go s.write()
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
	live := s.queue[:0]
	for _, c := range s.queue {
		if c.Ended() {
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
	defer s.wg.Done()
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
	s.conn, s.pipe, s.runID = nil, nil, ""
}

// send sends one batch as one pipeline and delivers every call's result.
func (s *stream) send(batch []Call) {
	// Each call's own deadline was checked; go-redis's timeouts bound the
	// I/O, or, for a client with ContextTimeoutEnabled, the batch's latest
	// deadline: a node that stops answering then holds the stream no
	// longer than its calls would wait.
	ctx := context.Background()
	if s.ctxTimeout {
		var latest time.Time
		for i := range batch {
			if batch[i].Deadline.After(latest) {
				latest = batch[i].Deadline
			}
		}
		s.bctx.begin(latest)
		defer s.bctx.end()
		ctx = &s.bctx
	}
	s.cmds = slices.Grow(s.cmds[:0], len(batch))[:len(batch)]
	defer clear(s.cmds)
	connErr, guardErr := s.prepare(ctx, batch)
	for j := range batch {
		c := &batch[j]
		var err error
		switch {
		case c.Ended():
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
		s.cmds[j] = redis.NewCmd(ctx, c.Op.Args(s.index)...)
	}
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
		if err := cmd.Err(); err != nil && !wire.IsReply(err) {
			broken = true
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

// prepare readies the stream for a batch. The stream of a *redis.Client (a
// standalone or Sentinel node, or a Cluster's shard) sends on a connection
// of its own (see streamConnAge), on which it learns the server's run_id
// once, before the first acquire it carries; any other client's sends
// through the client. connErr: no connection could be had, and nothing is sent;
// guardErr: the restart guard cannot work on this node, and acquires are
// not sent.
func (s *stream) prepare(ctx context.Context, batch []Call) (connErr, guardErr error) {
	cl, ok := s.client.(*redis.Client)
	if !ok {
		return nil, nil
	}
	if s.conn != nil && time.Since(s.connAt) >= streamConnAge {
		s.hangUp()
	}
	if s.conn == nil {
		if !s.dialed {
			// Once, a round trip on the pool first: it dials when the pool
			// has no idle connection, and hands the connection back, which
			// go-redis notes, so that the connection taken next (the pool's
			// most recently used) is not peeked at for 5 s. The stream's
			// own connection, handed back later, is noted the same way.
			ping := redis.NewCmd(ctx, "ping")
			if err := cl.Process(ctx, noRetry{ping}); err != nil {
				return err, nil
			}
			s.dialed = true
		}
		s.conn, s.connAt = cl.Conn(), time.Now()
		s.pipe = s.conn.Pipeline()
	}
	if !s.guard || s.runID != "" || !slices.ContainsFunc(batch, func(c Call) bool { return wire.IsAcquire(c.Op.Kind) }) {
		return nil, nil
	}
	if s.infoWorks {
		// The node has answered INFO before: ask it again in the batch's
		// own pipeline, ahead of the acquires, at no extra round trip
		// (send checks the answer).
		s.info = redis.NewStringCmd(ctx, "info", "server")
		return nil, nil
	}
	// The first time, INFO goes alone, so that a node that refuses it is
	// sent no acquire at all.
	info, err := s.conn.Info(ctx, "server").Result()
	if err != nil && !wire.IsReply(err) {
		s.hangUp()
		return err, nil
	}
	if guardErr := s.learnRunID(info, err); guardErr != nil {
		return nil, guardErr
	}
	return nil, nil
}

// learnRunID takes the run_id from an INFO server reply (or its error),
// and returns the restart guard's error when there is none to take.
func (s *stream) learnRunID(info string, err error) error {
	if err != nil {
		s.infoWorks = false
		return fmt.Errorf("NOGUARD redlock: the restart guard needs INFO server, and this node refused it: %w", err)
	}
	id, ok := runID(info)
	if !ok {
		s.infoWorks = false
		return errors.New("NOGUARD redlock: the restart guard needs the node's run_id, and INFO server reports none")
	}
	s.runID, s.infoWorks = id, true
	return nil
}

// checkInfo reads the answer to an INFO asked in the batch's pipeline. If
// the node refused it (its ACL changed since it last answered), the
// batch's acquires ran unguarded: the keys they created are taken back, on
// the same connection, and they answer with the guard's error.
func (s *stream) checkInfo(ctx context.Context, batch []Call) {
	info := s.info
	s.info = nil
	if info == nil || (info.Err() != nil && !wire.IsReply(info.Err())) {
		return // the connection failed: so did every command of the batch
	}
	guardErr := s.learnRunID(info.Val(), info.Err())
	if guardErr == nil {
		return
	}
	for j, c := range batch {
		cmd := s.cmds[j]
		if cmd == nil || !wire.IsAcquire(c.Op.Kind) {
			continue
		}
		if res := wire.Decode(c.Op.Kind, cmd); res.Status == wire.StatusOK {
			back := wire.NewOp(wire.OpRelease, c.Op.Key, c.Op.Token, "", 0)
			back.Keys, back.Mode = c.Op.Keys, c.Op.Mode
			back.Encode()
			_ = s.conn.Process(ctx, noRetry{redis.NewCmd(ctx, back.Args(s.index)...)})
		}
		s.cmds[j] = redis.NewCmd(ctx)
		s.cmds[j].SetErr(guardErr)
	}
}

// runID reads the run_id field of an INFO server reply.
func runID(info string) (string, bool) {
	_, rest, ok := strings.Cut(info, "run_id:")
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, "\r\n")
	id = strings.TrimSpace(id)
	return id, id != ""
}

// evalMissing sends again, as EVAL (which also caches the script), the calls
// the node answered NOSCRIPT, e.g. after SCRIPT FLUSH: such a call did not
// run, so sending it is not a replay. The others are left out of this
// second round.
func (s *stream) evalMissing(ctx context.Context, batch []Call) {
	if !slices.ContainsFunc(s.cmds, func(cmd *redis.Cmd) bool { return cmd != nil && wire.IsNoScript(cmd.Err()) }) {
		return
	}
	done := slices.Clone(s.cmds)
	for j, c := range batch {
		cmd := s.cmds[j]
		if cmd == nil || !wire.IsNoScript(cmd.Err()) {
			s.cmds[j] = nil
			continue
		}
		s.cmds[j] = redis.NewCmd(ctx, c.Op.EvalArgs(s.index)...)
	}
	s.run(ctx)
	for j, cmd := range done {
		if s.cmds[j] == nil {
			s.cmds[j] = cmd
		}
	}
}

// redirectMoved sends again, through the ClusterClient, the calls a shard
// answered MOVED or ASK: the slot is served elsewhere now, and the shard
// did not run them. The ClusterClient follows the redirection and reloads
// its slot map.
func (s *stream) redirectMoved(ctx context.Context, batch []Call) {
	if s.redirect == nil {
		return
	}
	for j, c := range batch {
		cmd := s.cmds[j]
		if cmd == nil || !isMoved(cmd.Err()) {
			continue
		}
		s.cmds[j] = redis.NewCmd(ctx, c.Op.Args(s.index)...)
		_ = s.redirect.Process(ctx, noRetry{s.cmds[j]})
		if wire.IsNoScript(s.cmds[j].Err()) {
			s.cmds[j] = redis.NewCmd(ctx, c.Op.EvalArgs(s.index)...)
			_ = s.redirect.Process(ctx, noRetry{s.cmds[j]})
		}
	}
}

func isMoved(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}
