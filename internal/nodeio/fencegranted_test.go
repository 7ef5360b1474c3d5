package nodeio

import (
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlainFencedInABatch: plain fenced acquires (a SET and a ZADD each)
// in one batch with other calls, against redis-server. Each answers for
// its own key: a fresh counter takes the proposal; a counter ahead of it,
// or an older Client's string counter, is followed on the node by the
// script, which hands out the node's next value; a held key is refused,
// its counter raised all the same; a bad counter fails the call and says
// the key is Kept. The calls around them answer as sent alone.
func TestPlainFencedInABatch(t *testing.T) {
	servers := redistest.Start(t, 1)
	rc := redis.NewClient(&redis.Options{Addr: servers[0].Addr})
	t.Cleanup(func() { _ = rc.Close() })
	done := make(chan struct{})
	var writers sync.WaitGroup
	n := New(rc, servers[0].Addr, 3) // node 3: its values are ≡ 3 (mod 64)
	n.Bind(done, func(f func()) { writers.Go(f) }, false)
	t.Cleanup(func() { close(done); writers.Wait() })
	ctx := t.Context()

	const p = 1150000000000063 // a proposal: ≡ 63 (mod 64)
	fenced := func(key, token string) *wire.Op {
		o := wire.NewOp(wire.OpAcquireFencedPlain, key, token, token, time.Minute)
		o.Fence = p
		return o
	}
	acquire := func(key, token string) *wire.Op { return wire.NewOp(wire.OpAcquire, key, token, token, time.Minute) }
	// The stream's first acquire is a script, and plain ones go only
	// after: warm it up.
	require.Equal(t, wire.StatusOK, sendTogether(t, n, acquire("warm", "t0"))[0].Status)

	require.NoError(t, rc.ZAdd(ctx, "ahead:fence", redis.Z{Score: p + 100, Member: "c"}).Err())
	require.NoError(t, rc.Set(ctx, "string:fence", p+200, 0).Err())
	require.NoError(t, rc.Set(ctx, "held", "other", time.Minute).Err())
	require.NoError(t, rc.Set(ctx, "bad:fence", "x", 0).Err())
	r := &results{got: map[int]wire.Result{}}
	ops := []*wire.Op{
		fenced("fresh", "t1"), acquire("plain", "t2"), fenced("ahead", "t3"),
		fenced("string", "t4"), fenced("held", "t5"), fenced("bad", "t6"), acquire("plain", "t7"),
	}
	r.wg.Add(len(ops))
	calls := make([]Call, len(ops))
	for i, op := range ops {
		op.Encode()
		calls[i] = Call{Ctx: ctx, Deadline: time.Now().Add(10 * time.Second), Op: op, Index: i, To: r}
	}
	n.StartAll(calls)
	r.wg.Wait()
	got := r.got

	assert.Equal(t, wire.StatusOK, got[0].Status, "fresh")
	assert.Equal(t, int64(p), got[0].Fence, "fresh: the proposal taken")
	assert.Equal(t, wire.StatusOK, got[1].Status, "the acquire between")
	for i, above := range map[int]int64{2: p + 100, 3: p + 200} {
		assert.Equal(t, wire.StatusRefreshed, got[i].Status, "call %d: the script re-entered the key its SET made", i)
		assert.Greater(t, got[i].Fence, above, "call %d", i)
		assert.Equal(t, int64(3), got[i].Fence%wire.FenceModulus, "call %d: node 3's residue", i)
	}
	assert.Equal(t, wire.StatusHeld, got[4].Status, "held")
	score, err := rc.ZScore(ctx, "held:fence", "c").Result()
	require.NoError(t, err)
	assert.Equal(t, float64(p), score, "the refused SET's ZADD raised the counter")
	assert.Error(t, got[5].Err, "bad counter")
	assert.True(t, got[5].Kept, "bad counter: the key its SET made is Kept, to take back")
	v, err := rc.Get(ctx, "bad").Result()
	require.NoError(t, err)
	assert.Equal(t, "t6", v)
	assert.Equal(t, wire.StatusHeld, got[6].Status, "the acquire behind: t2 holds the key")
	typ, err := rc.Type(ctx, "string:fence").Result()
	require.NoError(t, err)
	assert.Equal(t, "zset", typ, "the string counter replaced by the sorted set")
}
