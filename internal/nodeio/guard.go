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
// the same connection, and they answer with the guard's error. A
// take-back wakes the key's next waiter (with the acquire's Wake), as
// every take-back of a failed attempt does.
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
			back.Keys, back.Mode, back.Wake = c.Op.Keys, c.Op.Mode, c.Op.Wake
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
