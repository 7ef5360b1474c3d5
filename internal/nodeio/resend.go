package nodeio

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// This file sends again the calls a node did not run: NOSCRIPT (the
// script not cached), and a Cluster shard's MOVED or ASK.

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
		l.cmds[j] = redis.NewCmd(ctx, c.Op.EvalArgs(l.s.index)...)
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
		l.cmds[j] = redis.NewCmd(ctx, c.Op.Args(l.s.index)...)
		_ = l.s.redirect.Process(ctx, noRetry{l.cmds[j]})
		if wire.IsNoScript(l.cmds[j].Err()) {
			l.cmds[j] = redis.NewCmd(ctx, c.Op.EvalArgs(l.s.index)...)
			_ = l.s.redirect.Process(ctx, noRetry{l.cmds[j]})
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
