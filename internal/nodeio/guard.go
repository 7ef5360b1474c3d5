package nodeio

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file is how a stream gets its connection, and the restart guard's
// part of it: the run_id of the server at the other end, learnt once per
// connection.

// prepare readies the lane for a batch. A lane of a *redis.Client's
// stream (a standalone or Sentinel node, or a Cluster's shard) sends on a
// connection of its own (see streamConnAge), on which it learns the
// server's run_id once, before the first acquire it carries; any other
// client's sends through the client. connErr: no connection could be had, and nothing is sent;
// guardErr: the restart guard cannot work on this node, and acquires are
// not sent.
func (l *lane) prepare(ctx context.Context, batch []Call) (connErr, guardErr error) {
	cl, ok := l.s.client.(*redis.Client)
	if !ok {
		return nil, nil
	}
	if l.conn != nil && l.first && !l.live() {
		l.hangUp() // a lane other than the first ends instead (stream.write)
	}
	if l.conn == nil {
		if !l.s.dialed.Load() {
			// Once, a round trip on the pool first: it dials when the pool
			// has no idle connection, and hands the connection back, which
			// go-redis notes, so that the connection taken next (the pool's
			// most recently used) is not peeked at for 5 s. The stream's
			// own connection, handed back later, is noted the same way.
			ping := redis.NewCmd(ctx, "ping")
			if err := cl.Process(ctx, noRetry{ping}); err != nil {
				return err, nil
			}
			l.s.dialed.Store(true)
		}
		l.conn, l.connAt = cl.Conn(), time.Now()
		l.pipe = l.conn.Pipeline()
	}
	if !l.s.guard || l.runID != "" || !slices.ContainsFunc(batch, func(c Call) bool { return wire.TellsRunID(c.Op) }) {
		return nil, nil
	}
	if l.s.infoWorks.Load() {
		// The node has answered INFO before: ask it again in the batch's
		// own pipeline, ahead of the acquires, at no extra round trip
		// (send checks the answer).
		l.info = redis.NewStringCmd(ctx, "info", "server")
		return nil, nil
	}
	// The first time, INFO goes alone, so that a node that refuses it is
	// sent no acquire at all.
	info, err := l.conn.Info(ctx, "server").Result()
	if err != nil && !wire.IsReply(err) {
		l.hangUp()
		return err, nil
	}
	if guardErr := l.learnRunID(info, err); guardErr != nil {
		return nil, guardErr
	}
	return nil, nil
}

// ready readies a lane other than the first before it takes any call: it
// takes a connection from the pool and has one round trip on it, INFO
// server for the lane's run_id when the restart guard is on, else PING,
// by the time given. So a lane's first call pays no dial and no handshake
// inside its deadline, and a lane opened to a node that answers nothing
// never carries one. The stream has a lane beside the first only when
// the client bounds its reads (maxLanes), so the context (or, without
// ContextTimeoutEnabled, ReadTimeout) bounds the round trip, and Close
// waits for a lane readying no longer than that.
func (l *lane) ready(by time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), by)
	defer cancel()
	conn := l.s.client.(*redis.Client).Conn()
	cmd := redis.NewCmd(ctx, "ping")
	if l.s.guard {
		cmd = redis.NewCmd(ctx, "info", "server")
	}
	err := conn.Process(ctx, noRetry{cmd})
	if l.s.guard && (err == nil || wire.IsReply(err)) {
		info, _ := cmd.Text()
		err = l.learnRunID(info, err)
	}
	if err != nil {
		_ = conn.Close()
		return err
	}
	l.conn, l.connAt, l.pipe = conn, time.Now(), conn.Pipeline()
	return nil
}

// learnRunID takes the run_id from an INFO server reply (or its error),
// and returns the restart guard's error when there is none to take.
func (l *lane) learnRunID(info string, err error) error {
	if err != nil {
		l.s.infoWorks.Store(false)
		return fmt.Errorf("NOGUARD redlock: the restart guard needs INFO server, and this node refused it: %w", err)
	}
	id, ok := runID(info)
	if !ok {
		l.s.infoWorks.Store(false)
		return errors.New("NOGUARD redlock: the restart guard needs the node's run_id, and INFO server reports none")
	}
	l.runID = id
	l.s.infoWorks.Store(true)
	return nil
}

// checkInfo reads the answer to an INFO asked in the batch's pipeline. If
// the node refused it (its ACL changed since it last answered), the
// batch's acquires ran unguarded: the keys they created are taken back, on
// the same connection, and they answer with the guard's error. A
// take-back wakes the key's next waiter (with the acquire's Wake), as
// every take-back of a failed attempt does.
func (l *lane) checkInfo(ctx context.Context, batch []Call) {
	info := l.info
	l.info = nil
	if info == nil || (info.Err() != nil && !wire.IsReply(info.Err())) {
		return // the connection failed: so did every command of the batch
	}
	guardErr := l.learnRunID(info.Val(), info.Err())
	if guardErr == nil {
		return
	}
	for j, c := range batch {
		cmd := l.cmds[j]
		if cmd == nil || !wire.IsAcquire(c.Op.Kind) {
			continue
		}
		if res := wire.Decode(c.Op.Kind, cmd); res.Status == wire.StatusOK {
			back := wire.NewOp(wire.OpRelease, c.Op.Key, c.Op.Token, "", 0)
			back.Keys, back.Mode, back.Wake, back.WakeOnly = c.Op.Keys, c.Op.Mode, c.Op.Wake, true
			back.Encode()
			_ = l.conn.Process(ctx, noRetry{redis.NewCmd(ctx, back.Args(l.s.index)...)})
		}
		l.cmds[j] = redis.NewCmd(ctx)
		l.cmds[j].SetErr(guardErr)
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
