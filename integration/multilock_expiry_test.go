package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// TestMultiKeyExpiresTogether: on real redis-server, every key a
// multi-key acquire, extend or cooldown release writes on a node gets one
// expiry (PEXPIRETIME), so that the set cannot expire a key at a time.
// 20,000 keys make each script's loop take several milliseconds, so keys
// given their TTL one by one (PX, PEXPIRE) would differ; the production
// scripts run here through the same op encoding the library sends.
func TestMultiKeyExpiresTogether(t *testing.T) {
	nodes := StartNodes(t, 1)
	rc := Admin(t, nodes[0])
	ctx := context.Background()
	keys := make([]string, 20000)
	for i := range keys {
		keys[i] = fmt.Sprintf("redlock:{together:%d}", i)
	}
	run := func(name string, kind wire.Kind, ttl time.Duration) {
		t.Helper()
		o := wire.NewOp(kind, keys[0], "tok", "tok", ttl)
		o.Keys, o.Mode = keys, wire.ModeSet
		o.Encode()
		if err := rc.Do(ctx, o.EvalArgs(0)...).Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pipe := rc.Pipeline()
		cmds := make([]*redis.DurationCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.PExpireTime(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		first := cmds[0].Val()
		for i, c := range cmds {
			if c.Val() != first || first <= 0 {
				t.Fatalf("%s: key %d expires at %v, key 0 at %v", name, i, c.Val(), first)
			}
		}
	}
	run("acquire", wire.OpAcquire, time.Minute)
	run("extend", wire.OpExtend, 2*time.Minute)
	run("release with a cooldown", wire.OpRelease, time.Minute) // the keys stay until it ends
}
