package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// What a contended hand-off costs a node, op by op on one real
// redis-server: the three scripts every node runs for each acquisition in
// the steady state of make bench's contention measure (processes taking
// turns on one key, waiters queued behind the holder): the next waiter's
// look that joins the queue, the holder's release that grants it the key,
// and the new holder's extension to the full TTL. Under contention the
// nodes' CPU is what a hand-off waits for (docs/performance.md), and a
// script's commands are most of it: each costs a node about as much again
// as the command itself in Lua's call, argument and reply handling.

// handoffReplay replays hand-offs on one node: a key held, the next
// waiter, and behind it waiters that never reach the head.
type handoffReplay struct {
	t      testing.TB
	admin  *redis.Client
	key    string
	ticket int64 // the next waiter's
	n      int   // hand-offs so far
	loaded map[string]bool
}

const handoffLease = time.Second

func newHandoffReplay(t testing.TB, n *Node, behind int) *handoffReplay {
	h := &handoffReplay{t: t, admin: Admin(t, n), key: RedisKey(UniqueKey(t, []*Node{n})),
		ticket: time.Now().UnixMicro(), loaded: map[string]bool{}}
	if err := h.admin.Set(context.Background(), h.key, h.id(0), 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	for j := range behind { // tickets after every waiter's, leases longer than the test
		h.run(h.look(fmt.Sprintf("z.wi%d", j), h.ticket+1e12+int64(j), time.Hour))
	}
	return h
}

// id is the place ID of the n-th holder, the Clients alternating.
func (h *handoffReplay) id(n int) string { return fmt.Sprintf("%c.wi%d", "ab"[n%2], n) }

// look is a waiter's look that joins (or refreshes) its place, as the
// library sends it (Client.queueOp, with the look's number).
func (h *handoffReplay) look(id string, ticket int64, lease time.Duration) *wire.Op {
	o := &wire.Op{Kind: wire.OpQueue, Key: h.key, Wake: "redlock:wake:", Seq: 1}
	o.Place = &wire.Place{ID: id, Ticket: ticket, Lease: lease}
	return o
}

// run sends o as the library's streams do once the node holds the
// script (EVALSHA), and returns the reply.
func (h *handoffReplay) run(o *wire.Op) any {
	h.t.Helper()
	ctx := context.Background()
	o.Encode()
	if !h.loaded[o.SHA()] {
		if err := h.admin.ScriptLoad(ctx, o.Source()).Err(); err != nil {
			h.t.Fatal(err)
		}
		h.loaded[o.SHA()] = true
	}
	r, err := h.admin.Do(ctx, o.Args(0)...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		h.t.Fatalf("%v: %v", o.Kind, err)
	}
	return r
}

// step is one hand-off: the next waiter joins, the holder's release
// grants it the key, and it extends the key to the full TTL.
func (h *handoffReplay) step() {
	h.t.Helper()
	holder, next := h.id(h.n), h.id(h.n+1)
	h.ticket++
	h.run(h.look(next, h.ticket, handoffLease))
	o := wire.NewOp(wire.OpRelease, h.key, holder, holder, 0)
	o.Wake = "redlock:wake:"
	if r, ok := h.run(o).([]any); !ok || len(r) != 2 || r[1] != next {
		h.t.Fatalf("hand-off %d: the release answered %#v, want it to grant %s", h.n, r, next)
	}
	if r := h.run(wire.NewOp(wire.OpExtend, h.key, next, next, 10*time.Second)); r != int64(1) {
		h.t.Fatalf("hand-off %d: the extension answered %#v, want 1", h.n, r)
	}
	h.n++
}

// nodeCommands is what the node ran in scripts since its stats were
// reset: every command but the scripts' own calls and the test's.
func nodeCommands(t testing.TB, admin *redis.Client) (map[string]int, int) {
	calls := commandStat(t, admin, "calls")
	total := 0
	for name, n := range calls {
		if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "config") || name == "info" {
			delete(calls, name)
			continue
		}
		total += n
	}
	return calls, total
}

// TestHandoffCommands: the steady hand-off runs 25 commands on each node
// in its three scripts: the look 10 (GET, TIME, ZADD ×3, PTTL, PEXPIRE,
// ZRANGE, ZSCORE, PTTL), the release 13 (GET; ZREM and ZSCORE for its own
// place; TIME, ZRANGE, ZSCORE for the head; ZREM ×2, ZSCORE and ZREM for
// the head's place and look number; PUBLISH, EXISTS, SET), the extension
// 2. (27 until 2026-12-03: the look and the release each read the key
// twice.)
func TestHandoffCommands(t *testing.T) {
	n := StartNodes(t, 1)[0]
	h := newHandoffReplay(t, n, 2)
	for range 3 {
		h.step()
	}
	if err := h.admin.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	const steps, want = 20, 25
	for range steps {
		h.step()
	}
	calls, total := nodeCommands(t, h.admin)
	names := slices.Sorted(maps.Keys(calls))
	if total != want*steps {
		t.Errorf("%d commands a hand-off, want %d (%v: %v)", total/steps, want, names, calls)
	}
	if ran := commandStat(t, h.admin, "calls")["evalsha"]; ran != 3*steps {
		t.Errorf("%d scripts a hand-off, want 3", ran/steps)
	}
}

// BenchmarkHandoffScripts replays the steady hand-off on one node and
// reports what the node did for each: the commands its scripts ran, and
// the µs it spent in them (INFO commandstats; for instruction counts, run
// the node under callgrind: docs/performance.md). ns/op is the three
// round trips in series from the benchmark's one connection.
//
//	go test ./integration -run '^$' -bench HandoffScripts -count 6
func BenchmarkHandoffScripts(b *testing.B) {
	n := StartNodes(b, 1)[0]
	h := newHandoffReplay(b, n, 2)
	h.step()
	if err := h.admin.ConfigResetStat(b.Context()).Err(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		h.step()
	}
	_, total := nodeCommands(b, h.admin)
	usec := commandStat(b, h.admin, "usec")["evalsha"]
	b.ReportMetric(float64(total)/float64(b.N), "node-cmds/op")
	b.ReportMetric(float64(usec)/float64(b.N), "node-µs/op")
}
