package redlock

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// readerAttemptBroken: a waiting reader is let in on nodes 2, 3 and 4 by
// a writer's release whose notices are late, and attempts meanwhile:
// nodes 0 and 1 refuse it (a writer holds there), node 3 does not answer,
// so the attempt fails and is taken back. Then the notices come, naming a
// look the reader sent before its attempt, and the reader holds by them.
// The let-ins must still be on those nodes: the attempt entered where it
// was let in, and its take-back released its own token, not the place's
// ID. (TestChaosRWMutex found it in CI on 2026-12-03: when the attempt
// took the let-ins over, a reader held by let-ins its take-back had
// removed, and a writer got in beside it.) It returns what broke, "" if
// nothing did; variant, if not nil, runs on every node.
func readerAttemptBroken(t *testing.T, variant func(*wire.Op) string) (broke string) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(5)
		for _, f := range fakes {
			f.variant = variant
		}
		c := newTestClient(t, fakes)
		ctx := t.Context()
		tg := target{key: "rw:d", rkey: c.redisKey("rw:d"), mode: wire.ModeRead}
		lc := &lockConfig{ttl: time.Minute}
		w := c.hand.join(tg, lc)
		defer c.hand.leave(w, nil)
		heardAll(c)
		n := strconv.FormatInt(c.hand.numberLook(w, time.Now()), 10)
		lapse := strconv.FormatInt(time.Now().Add(c.cfg.lease).UnixMilli(), 10)
		for _, f := range fakes[2:] { // what the writer's release does there (wire's letIn)
			f.mem.Do("ZADD", tg.rkey+":readers", lapse, w.ID)
		}
		for _, f := range fakes[:2] {
			f.mem.Do("SET", tg.rkey, "writer", "PX", "60000")
		}
		fakes[3].setErr(errFakeDown)
		if l, qerr := c.attempt(ctx, tg, lc, 1, w); qerr == nil {
			_ = l.Unlock(ctx)
			t.Fatal("the schedule did not build: the attempt won")
		}
		synctest.Wait() // its take-back ran
		fakes[3].setErr(nil)
		for i := 2; i < 5; i++ {
			c.hand.letInNotice(i, tg.rkey, w.ID, n)
		}
		l := c.takeLetIn(ctx, tg, lc, w, 2)
		if l == nil {
			return // (not counted: safe, and it attempts again)
		}
		defer func() { _ = l.Unlock(context.Background()) }()
		holding := 0
		for _, f := range fakes {
			if s, ok := f.mem.Do("ZSCORE", tg.rkey+":readers", l.Token()).(string); ok {
				if ms, _ := strconv.ParseInt(s, 10, 64); ms > time.Now().UnixMilli() {
					holding++
				}
			}
		}
		if holding < c.quorum() {
			broke = fmt.Sprintf("held by let-ins on 3 nodes, of which the attempt's take-back left %d", holding)
		}
	})
	return broke
}

func TestReaderAttemptKeepsLetIns(t *testing.T) {
	if b := readerAttemptBroken(t, nil); b != "" {
		t.Fatal(b)
	}
}

// TestReaderAttemptMutantCaught: the bug, put back, breaks the schedule.
func TestReaderAttemptMutantCaught(t *testing.T) {
	mutant := &fakeNode{}
	readerAttemptTakesLetIn.applyNode(mutant)
	if b := readerAttemptBroken(t, mutant.variant); b == "" {
		t.Fatal("a reader's attempt that takes its let-in over broke nothing")
	} else {
		t.Log("caught:", b)
	}
}
