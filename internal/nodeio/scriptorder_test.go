package nodeio

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// results is a Sink that keeps each call's result, by index.
type results struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	got map[int]wire.Result
}

func (r *results) Deliver(i int, res wire.Result) {
	r.mu.Lock()
	r.got[i] = res
	r.mu.Unlock()
	r.wg.Done()
}

// sendTogether sends ops to n in one batch and returns their results.
func sendTogether(t *testing.T, n *Node, ops ...*wire.Op) []wire.Result {
	t.Helper()
	r := &results{got: map[int]wire.Result{}}
	r.wg.Add(len(ops))
	calls := make([]Call, len(ops))
	for i, op := range ops {
		op.Encode()
		calls[i] = Call{Ctx: t.Context(), Deadline: time.Now().Add(10 * time.Second), Op: op, Index: i, To: r}
	}
	n.StartAll(calls)
	r.wg.Wait()
	out := make([]wire.Result, len(ops))
	for i := range out {
		out[i] = r.got[i]
		require.NoError(t, out[i].Err, "call %d", i)
	}
	return out
}

// TestBatchKeepsOrderWhereTheNodeLacksAScript: a batch runs in its order
// on the node even where a call's script is not in the node's script
// cache: a fresh server's, or one flushed since. A release whose EVALSHA
// answered NOSCRIPT used to be sent again after the batch, so the acquire
// behind it (a hand-over's attempt, handover.go in the root package) ran
// first and was refused: TestHandOverInOneClient failed under CI when a
// Client's first release on a node was a hand-over.
func TestBatchKeepsOrderWhereTheNodeLacksAScript(t *testing.T) {
	servers := redistest.Start(t, 1)
	rc := redis.NewClient(&redis.Options{Addr: servers[0].Addr})
	t.Cleanup(func() { _ = rc.Close() })
	done := make(chan struct{})
	var writers sync.WaitGroup
	n := New(rc, servers[0].Addr, 0)
	n.Bind(done, func(f func()) { writers.Go(f) }, false)
	t.Cleanup(func() { close(done); writers.Wait() })

	acquire := func(token string) *wire.Op { return wire.NewOp(wire.OpAcquire, "k", token, token, time.Minute) }
	release := func(token string) *wire.Op { return wire.NewOp(wire.OpRelease, "k", token, token, 0) }
	handOver := func(from, to string) {
		t.Helper()
		got := sendTogether(t, n, release(from), acquire(to))
		assert.Equal(t, wire.StatusOK, got[0].Status, "the release runs first")
		assert.Equal(t, wire.StatusOK, got[1].Status, "the acquire behind it finds the key free")
	}

	// A fresh server: the acquire script runs (and is cached), the release
	// script never has when the batch leaves.
	require.Equal(t, wire.StatusOK, sendTogether(t, n, acquire("t1"))[0].Status)
	handOver("t1", "t2")

	// Flushed: the stream learns it from the first NOSCRIPT, and sends
	// every script's source again from then on.
	require.NoError(t, rc.ScriptFlush(context.Background()).Err())
	sendTogether(t, n, wire.NewOp(wire.OpInspect, "k", "", "", 0))
	handOver("t2", "t3")
}
