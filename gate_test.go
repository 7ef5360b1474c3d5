package redlock

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// queueGateBroken: a waiter that is not first attempts at a free key
// whose queue has a live first waiter; the nodes' gate must refuse it
// (ErrQueued) and keep the key for the first. It returns what broke, ""
// if nothing did; variant, if not nil, runs on every node. (A Lock
// attempts only once a look or a notice says it is first, but a node's
// view can differ from the majority's: the gate is what every node
// enforces whatever the caller believes.)
func queueGateBroken(t *testing.T, variant func(*wire.Op) string) (broke string) {
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		for _, f := range fakes {
			f.variant = variant
		}
		a, b := newTestClient(t, fakes), newTestClient(t, fakes)
		ctx := t.Context()
		lc, err := b.callConfig("k", toLock, nil)
		if err != nil {
			t.Fatal(err)
		}
		first := a.hand.join(a.target("k"), &lockConfig{})
		defer a.hand.leave(first, nil)
		if _, f := a.pollQueue(ctx, &lc, first); f.r != nil {
			t.Fatalf("the first waiter's look: %v", f.r)
		}
		synctest.Wait()
		time.Sleep(time.Millisecond) // a later ticket (a tie would go by the Clients' random IDs)
		behind := b.hand.join(b.target("k"), &lockConfig{})
		defer b.hand.leave(behind, nil)
		b.pollQueue(ctx, &lc, behind) // second in line on every node
		synctest.Wait()

		l, qerr := b.attempt(ctx, b.target("k"), &lc, 1, behind)
		if qerr == nil {
			broke = "a waiter behind the first took the key the first is owed"
			_ = l.Unlock(ctx)
			return
		}
		for _, n := range qerr.Nodes {
			if !errors.Is(n.Err, errUndecided) && !errors.Is(n.Err, ErrQueued) {
				broke = fmt.Sprintf("node %s refused with %v, want ErrQueued", n.Node, n.Err)
			}
		}
	})
	return broke
}

func TestQueueGateKeepsAFreeKeyForTheFirst(t *testing.T) {
	if b := queueGateBroken(t, nil); b != "" {
		t.Fatal(b)
	}
}

// TestQueueGateMutantCaught: the catalogue's mutant that skips the gate
// breaks the schedule every time (the simulator catches it only as its
// goroutines happen to run: sim_mutants_test.go).
func TestQueueGateMutantCaught(t *testing.T) {
	mutant := &fakeNode{}
	queueGateSkipped.applyNode(mutant)
	if b := queueGateBroken(t, mutant.variant); b == "" {
		t.Fatal("the gate skipped broke nothing")
	} else {
		t.Log("caught:", b)
	}
}
