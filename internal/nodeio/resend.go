package nodeio

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file sends again the calls a node did not run: NOSCRIPT (the
// script not cached), and a Cluster shard's MOVED or ASK; and follows a
// plain fenced grant that did not take the proposal with the script.

// evalMissing sends again, as EVAL (which also caches the script), the calls
// the node answered NOSCRIPT, e.g. after SCRIPT FLUSH: such a call did not
// run, so sending it is not a replay; but the calls behind it in the batch
// have run, so it runs out of its order (stream.held keeps this to a node
// that lost its cache unseen, since the stream learned that it held the
// script). The others are left out of this second round.
func (l *lane) evalMissing(ctx context.Context, batch []Call) {
	if !slices.ContainsFunc(l.cmds, func(cmd *redis.Cmd) bool { return cmd != nil && wire.IsNoScript(cmd.Err()) }) {
		return
	}
	l.s.forgetScripts() // the node lost its script cache (SCRIPT FLUSH, another server)
	done := slices.Clone(l.cmds)
	for j, c := range batch {
		cmd := l.cmds[j]
		if cmd == nil || !wire.IsNoScript(cmd.Err()) {
			l.cmds[j] = nil
			continue
		}
		l.cmds[j], l.pairs[j] = redis.NewCmd(ctx, c.Op.EvalArgs(l.s.index)...), nil
	}
	l.run(ctx)
	for j, cmd := range done {
		if l.cmds[j] == nil {
			l.cmds[j] = cmd
		}
	}
}

// redirectMoved sends again, through the ClusterClient, the calls a shard
// answered MOVED or ASK: the slot is served elsewhere now, and the shard
// did not run them. The ClusterClient follows the redirection and reloads
// its slot map.
func (l *lane) redirectMoved(ctx context.Context, batch []Call) {
	if l.s.redirect == nil {
		return
	}
	for j, c := range batch {
		cmd := l.cmds[j]
		if cmd == nil || !isMoved(cmd.Err()) {
			continue
		}
		if l.pairs[j] != nil { // one script, not a pair that a redirection could split
			batch[j].Op, l.pairs[j] = c.Op.Scripted(), nil
			c = batch[j]
		}
		l.cmds[j] = redis.NewCmd(ctx, c.Op.Args(l.s.index)...)
		_ = l.s.redirect.Process(ctx, noRetry{l.cmds[j]})
		if wire.IsNoScript(l.cmds[j].Err()) {
			l.cmds[j] = redis.NewCmd(ctx, c.Op.EvalArgs(l.s.index)...)
			_ = l.s.redirect.Process(ctx, noRetry{l.cmds[j]})
		}
	}
}

// fenceGranted follows each plain fenced grant whose ZADD did not take
// the proposal (wire.PlainFenced) with the fenced acquire's script, on the
// same connection: the key is ours, so the script re-enters and hands out
// the node's next value, and its reply stands for the pair's. The other
// calls are left out of this second round.
func (l *lane) fenceGranted(ctx context.Context, batch []Call) {
	again := func(j int) bool {
		if l.pairs[j] == nil || l.cmds[j] == nil {
			return false
		}
		_, ok := wire.PlainFenced(batch[j].Op, l.cmds[j], l.pairs[j])
		return ok
	}
	need := false
	for j := range batch {
		need = need || again(j)
	}
	if !need {
		return
	}
	done := slices.Clone(l.cmds)
	for j := range batch {
		if !again(j) {
			l.cmds[j] = nil
			continue
		}
		batch[j].Op, l.pairs[j] = batch[j].Op.Regrant(), nil
		l.cmds[j] = l.scriptCmd(ctx, batch[j].Op)
	}
	l.run(ctx)
	for j, cmd := range done {
		if l.cmds[j] == nil {
			l.cmds[j] = cmd
		}
	}
}

// forgetScripts marks every script as not known to be held by the node
// (stream.held): when a lane hangs up (its next connection may be to a
// restarted server, or another one) and when the node answers NOSCRIPT. A
// call whose script is not known goes as EVAL with the source, so that it
// runs where it stands in its batch: as EVALSHA, its NOSCRIPT would be
// sent again after the calls behind it had run (evalMissing), and a
// hand-over's attempt ran before its release, and was refused
// (TestHandOverInOneClient, once under CI). A node that lost its cache
// unseen (SCRIPT FLUSH) still costs one batch its order.
func (s *stream) forgetScripts() {
	for i := range s.held {
		s.held[i].Store(false)
	}
}

func isMoved(err error) bool {
	return err != nil && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"))
}
