package integration

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/wire"
)

// grantedAfterRestart on real redis-server: a Client R that knew every
// node's process waits (Lock) for a key that h holds on nodes 0 and 1
// (node 2 refused it), after node 0 restarted empty and forgot h's key.
// Nodes 0 and 2 then each have a release grant the key to R's place
// (another holder's key there, "x", released by the production script):
// a majority of grants, one from the restarted node. R's Lock is
// returned on got (whoever takes it unlocks it); stop cancels it and
// waits for it. The releases' replies are checked to
// be grants to R's place, so the schedule is what it says.
func grantedAfterRestart(t *testing.T, hOpts, rOpts []redlock.Option) (h *redlock.Lock, got <-chan *redlock.Lock, stop func()) {
	t.Helper()
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	rk := RedisKey(key)
	cr := newClient(t, Clients(t, nodes, nil), rOpts...)
	warm(t, cr) // R learns every node's run_id
	if err := Admin(t, nodes[2]).Set(t.Context(), rk, "someone-else", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	h, err := newClient(t, Clients(t, nodes, nil), hOpts...).TryLock(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes[2:], key, 30*time.Second)
	nodes[0].Restart(t)
	for _, i := range []int{0, 2} {
		if err := Admin(t, nodes[i]).Set(t.Context(), rk, "x", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	out, finished := make(chan *redlock.Lock, 1), make(chan struct{})
	go func() {
		defer close(finished)
		l, err := cr.Lock(ctx, key)
		if err != nil && ctx.Err() == nil {
			t.Errorf("R's Lock: %v", err)
		}
		out <- l
	}()
	id := lookedTwice(t, nodes, rk)
	for _, i := range []int{2, 0} {
		o := wire.NewOp(wire.OpRelease, rk, "x", "", 0)
		o.Wake = "redlock:wake:"
		if r := gateOp(t, nodes[i], o); !slices.Equal(asSlice(r), []any{int64(1), id}) {
			t.Fatalf("%s: x's release answered %#v, want a grant to %s", nodes[i].Addr, r, id)
		}
	}
	return h, out, func() {
		cancel()
		<-finished
		select {
		case l := <-out: // the test did not take it
			if l != nil {
				_ = l.Unlock(context.Background())
			}
		default:
		}
	}
}

func asSlice(r any) []any { s, _ := r.([]any); return s }

// lookedTwice waits until R's place (a writer a release may grant: ".wi")
// stands in rk's queue on every node, and node 0 has had two more of its
// looks since, so that R's Client has heard node 0's new process (a look
// after its subscription's confirmation brings the run_id back); it
// returns the place's ID.
func lookedTwice(t *testing.T, nodes []*Node, rk string) string {
	t.Helper()
	var id string
	waitUntil(t, 30*time.Second, "R's place on every node", func() bool {
		for _, n := range nodes {
			q := Admin(t, n).ZRange(t.Context(), rk+":queue", 0, -1).Val()
			if len(q) != 1 || !strings.Contains(q[0], ".wi") || (id != "" && q[0] != id) {
				return false
			}
			id = q[0]
		}
		return true
	})
	seq := func() float64 { return Admin(t, nodes[0]).ZScore(t.Context(), rk+":seq", id).Val() }
	first := seq()
	waitUntil(t, 30*time.Second, "two more looks at node 0", func() bool { return seq() >= first+2 })
	return id
}

// TestGrantFromRestartedNodeRefused: with default options, a waiter
// granted the key by a majority whose grants include a node that
// restarted empty (and lost the holder's key) does not hold while the
// holder is valid: the restart guard refuses that node's grants as it
// refuses an acquire's (docs/design.md, "A writer granted the key by the
// release", and "Restart guard"). The guard's period is the default TTL,
// h's TTL, so whenever R holds h must have lost its validity or
// released; and once h releases, R holds.
func TestGrantFromRestartedNodeRefused(t *testing.T) {
	h, got, stop := grantedAfterRestart(t, nil, nil)
	defer stop()
	// The grants lapse with R's place (a waiter lease) or are taken back
	// by R's attempt; by then they can make no holder.
	lapsed := time.After(2 * time.Second)
	for done := false; !done; {
		select {
		case l := <-got:
			if l == nil {
				t.FailNow() // the goroutine said why
			}
			v := h.Validity()
			_ = l.Unlock(context.Background())
			if v > 0 {
				t.Fatalf("R holds (token %s) while h holds with %v left: the restarted node's grant counted", l.Token(), v)
			}
			// h's validity had ended (a machine stalled for seconds): R
			// may hold, and nothing is left to judge.
			t.Log("h's validity ended before R held")
			return
		case <-lapsed:
			done = true
		}
	}
	// Node 0 forgot h's key and node 2 never had it: the release is
	// confirmed by node 1 alone, whose key it deletes.
	if err := h.Unlock(t.Context()); err != nil && !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l == nil {
			t.Fatal("R's Lock failed after h's release")
		}
		if err := l.Unlock(t.Context()); err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("R does not hold 30 s after h's release")
	}
}

// TestGrantFromRestartedNodeGuardOffIsUnsafe is the canary: without the
// guard, the same grants make R a second holder beside h.
func TestGrantFromRestartedNodeGuardOffIsUnsafe(t *testing.T) {
	h, got, stop := grantedAfterRestart(t, []redlock.Option{redlock.WithTTL(time.Minute)}, []redlock.Option{redlock.WithRestartGuard(0)})
	defer stop()
	select {
	case l := <-got:
		if l == nil || h.Validity() <= 0 {
			t.Fatal("the schedule did not make two holders")
		}
		t.Logf("without the guard: R holds by %s beside h (%v left)", l.Token(), h.Validity().Round(time.Second))
		if err := l.Unlock(t.Context()); err != nil {
			t.Error(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("without the guard R should hold by the grants (the unsafe case)")
	}
	_ = h.Unlock(t.Context())
}
