package integration

import (
	"testing"

	"github.com/redlock-go/redlock"
)

// The uncontended fenced acquire as two plain commands, SET NX and ZADD GT
// CH (wire.OpAcquireFencedPlain), against real redis-server.

// TestUncontendedFencedAcquireIsSetAndZadd: with fencing, an uncontended
// TryLock sends each node a SET (NX PX) and a ZADD and no script, once the
// node's connection has run a script (as TestUncontendedAcquireIsOneSet
// says, a renewed connection's first acquire is the script again); each
// token is taken from the proposal on a majority, so no write-back is
// sent, and the tokens grow.
func TestUncontendedFencedAcquireIsSetAndZadd(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0]) // the counts must be this test's alone
	c := newClient(t, Clients(t, nodes, nil), redlock.WithFencing())
	var last uint64
	const cycles = 20
	all := countedCycles(t, nodes, c, cycles, func(l *redlock.Lock) {
		if l.Fence() <= last {
			t.Fatalf("token %d after %d", l.Fence(), last)
		}
		last = l.Fence()
	})
	for i, calls := range all {
		n := nodes[i]
		scripted := calls["evalsha"] + calls["eval"] - cycles // less the releases
		// A script's own commands are counted too: a scripted acquire's SET and ZADD are among them.
		plain := calls["set"] - scripted
		if plain+scripted != cycles || plain < cycles-5 || calls["zadd"] != calls["set"] {
			t.Errorf("%s: %d plain acquires (%d ZADDs in all) and %d scripted ones in %d cycles; want them all but a few plain, each with its ZADD (%v)", n.Addr, plain, calls["zadd"], scripted, cycles, calls)
		}
	}
}

// TestFencingCounterFromBefore: a fence counter written by a Client from
// before the sorted set (a string) is read, and the grant leaves the
// token in its place as the sorted set; a fenced Lock on such a key runs
// the script after its plain ZADD is refused (WRONGTYPE), and its token is
// above the old counter.
func TestFencingCounterFromBefore(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	ctx := t.Context()
	rkey := RedisKey(key)
	const before = uint64(1) << 51 // above any proposal
	for _, n := range nodes {
		if err := Admin(t, n).Set(ctx, rkey+":fence", before, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			Admin(t, n).Del(ctx, rkey+":fence")
		}
	})
	c := newClient(t, Clients(t, nodes, nil), redlock.WithFencing())
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= before {
		t.Fatalf("token %d, want above the counter from before (%d)", l.Fence(), before)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil { // every node's acquire and write-back done
		t.Fatal(err)
	}
	agree := 0
	for _, n := range nodes {
		typ, err := Admin(t, n).Type(ctx, rkey+":fence").Result()
		if err != nil || typ != "zset" {
			t.Fatalf("%s: the counter is a %q (%v), want the sorted set", n.Addr, typ, err)
		}
		if f, err := Counter(ctx, Admin(t, n), rkey); err == nil && f == l.Fence() {
			agree++
		}
	}
	if agree < 2 {
		t.Fatalf("the token %d is on %d counters, want a majority", l.Fence(), agree)
	}
}
