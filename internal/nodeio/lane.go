package nodeio

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file is one lane of a node's stream (stream.go): a writer
// goroutine with a connection of its own, which sends one batch at a time
// as one pipeline and delivers each call's result.

// lane is one writer of a stream, and what it knows of its connection.
type lane struct {
	s     *stream
	first bool // the stream's first lane, which sends whenever no other lane has a batch out
	// bctx: the one context the lane sends its batches on, when the
	// client has ContextTimeoutEnabled (a batch's deadline bounds its reads).
	bctx batchContext
	// keys are the keys of the batch out on the lane (under s.mu), for
	// the other lanes' order per key; empty between batches. Copied from
	// the ops, which may be reused once their calls delivered (the root
	// package pools its everyday rounds' ops).
	keys   []string
	sentAt time.Time // when the batch out was taken
	until  time.Time // the latest deadline of its calls
	spare  []Call    // the last batch's slice, for reuse

	conn   *redis.Conn // the lane's own connection (standalone, Sentinel, a Cluster's shard); nil until needed
	connAt time.Time   // when conn was taken
	info   *redis.StringCmd
	pipe   redis.Pipeliner // conn's pipeline, reused
	runID  string          // the run_id of the server at the other end of conn; "" not known
	cmds   []*redis.Cmd    // by position in the batch; nil for a call not sent
	pairs  []*redis.Cmd    // by position: the second command of a call sent as two (wire.Op.Pair), nil for others
	queued []redis.Cmder   // the pipeline's commands, gathered for one BatchProcess; reused
}

// live reports whether the lane's connection may carry another batch:
// it has one, not yet streamConnAge old.
func (l *lane) live() bool {
	return l.conn != nil && time.Since(l.connAt) < streamConnAge
}

// idleFor is how long the lane waits for calls before it ends: streamIdle,
// or for a lane other than the first, no longer than its connection may
// live, so that it does not stay counted as waiting once it may not send.
func (l *lane) idleFor() time.Duration {
	if l.first {
		return streamIdle
	}
	return min(streamIdle, streamConnAge-time.Since(l.connAt))
}

// hangUp gives the lane's connection back to the pool (or drops it, when
// it failed), so that the next batch starts on a fresh one.
func (l *lane) hangUp() {
	if l.conn != nil {
		_ = l.conn.Close()
	}
	l.conn, l.pipe, l.runID = nil, nil, ""
	l.s.scriptsRun.Store(false)
	l.s.forgetScripts()
}

// send sends one batch as one pipeline and delivers every call's result.
func (l *lane) send(batch []Call) {
	// Each call's own deadline was checked; go-redis's timeouts bound the
	// I/O, or, for a client with ContextTimeoutEnabled, the batch's latest
	// deadline: a node that stops answering then holds the stream no
	// longer than its calls would wait.
	ctx := context.Background()
	if l.s.ctxTimeout {
		l.bctx.begin(latestDeadline(batch))
		defer l.bctx.end()
		ctx = &l.bctx
	}
	l.cmds = slices.Grow(l.cmds[:0], len(batch))[:len(batch)]
	l.pairs = slices.Grow(l.pairs[:0], len(batch))[:len(batch)]
	defer clear(l.cmds)
	defer clear(l.pairs)
	l.makeCmds(ctx, batch)
	l.run(ctx)
	l.checkInfo(ctx, batch)
	l.evalMissing(ctx, batch)
	l.redirectMoved(ctx, batch)
	l.fenceGranted(ctx, batch)
	broken := false
	for j, c := range batch {
		cmd := l.cmds[j]
		if cmd == nil {
			continue
		}
		switch err := cmd.Err(); {
		case err != nil && !wire.IsReply(err):
			broken = true
		case !wire.IsPlain(c.Op.Kind) && (err == nil || errors.Is(err, redis.Nil)):
			l.s.scriptsRun.Store(true)
			if h := &l.s.held[c.Op.ScriptIndex()]; !h.Load() {
				h.Store(true) // once: not a shared write per reply
			}
		}
		var res wire.Result
		if pair := l.pairs[j]; pair != nil {
			res, _ = wire.PlainFenced(c.Op, cmd, pair) // not again: fenceGranted followed those up
		} else {
			res = c.Op.Decode(cmd)
		}
		if wire.TellsRunID(c.Op) {
			res.RunID = l.runID
		}
		c.To.Deliver(c.Index, res)
	}
	if broken && l.conn != nil {
		l.hangUp() // the next batch dials afresh and asks the run_id again
	}
}

// makeCmds makes the command of each call of the batch that is to be
// sent, in l.cmds, and answers the others at once: calls that ended, and
// every call when no connection could be had (or every acquire, when the
// restart guard cannot work on the node).
func (l *lane) makeCmds(ctx context.Context, batch []Call) {
	connErr, guardErr := l.prepare(ctx, batch)
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
		if !l.s.scriptsRun.Load() {
			c.Op = c.Op.Scripted()
		}
		l.cmds[j] = l.scriptCmd(ctx, c.Op)
		if p := c.Op.Pair(); p != nil {
			l.pairs[j] = redis.NewCmd(ctx, p...)
		}
	}
}

// scriptCmd is op's command for the lane's node: an EVAL of its script
// where the node is not known to hold it, so that it runs in its place
// (see stream.held), and otherwise its arguments as they are.
func (l *lane) scriptCmd(ctx context.Context, op *wire.Op) *redis.Cmd {
	if i := op.ScriptIndex(); i >= 0 && !l.s.held[i].Load() {
		return redis.NewCmd(ctx, op.EvalArgs(l.s.index)...)
	}
	return redis.NewCmd(ctx, op.Args(l.s.index)...)
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

// run sends the commands of l.cmds: a lone one as a plain command (the same
// bytes on the wire; go-redis's pipeline costs it 3 allocations more),
// several as one pipeline.
func (l *lane) run(ctx context.Context) {
	var lone *redis.Cmd
	n := 0
	for j, cmd := range l.cmds {
		if cmd != nil {
			lone = cmd
			n++
			if l.pairs[j] != nil {
				n++
			}
		}
	}
	if n == 0 {
		l.info = nil // nothing to send; asked again with the next acquire
	}
	switch {
	case n == 1 && l.info == nil && l.conn != nil:
		_ = l.conn.Process(ctx, noRetry{lone})
	case n == 1 && l.info == nil:
		_ = l.s.client.Process(ctx, noRetry{lone})
	case n > 0:
		pipe := l.pipe
		if l.conn == nil {
			pipe = l.s.client.Pipeline()
		}
		queued := l.queued[:0]
		if l.info != nil {
			queued = append(queued, l.info)
		}
		for j, cmd := range l.cmds {
			if cmd != nil {
				queued = append(queued, noRetry{cmd})
				if pair := l.pairs[j]; pair != nil {
					queued = append(queued, noRetry{pair})
				}
			}
		}
		_ = pipe.BatchProcess(ctx, queued...) // one append: Process grew the pipeline's slice a command at a time
		_, _ = pipe.Exec(ctx)
		clear(queued)
		l.queued = queued
	}
}

// signal wakes a lane waiting on w, unless a wake-up is pending already.
func signal(w chan struct{}) {
	select {
	case w <- struct{}{}:
	default:
	}
}
