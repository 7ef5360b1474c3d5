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

// handoffReplay replays hand-offs on one node: a key held (or a set's
// keys), the next waiter, and behind it waiters that never reach the
// head.
type handoffReplay struct {
	t      testing.TB
	admin  *redis.Client
	keys   []string // one key, or a set's
	mode   wire.Mode
	ticket int64 // the next waiter's
	n      int   // hand-offs so far
	loaded map[string]bool
	last   any // the last reply
}

const handoffLease = time.Second

// newHandoffReplay replays a mutex's hand-offs (keys 1) or a set's of
// that many keys.
func newHandoffReplay(t testing.TB, n *Node, keys, behind int) *handoffReplay {
	h := &handoffReplay{t: t, admin: Admin(t, n), ticket: time.Now().UnixMicro(), loaded: map[string]bool{}}
	key := UniqueKey(t, []*Node{n})
	for i := range keys {
		h.keys = append(h.keys, RedisKey(fmt.Sprintf("%s.%d", key, i)))
	}
	for _, k := range h.keys {
		if err := h.admin.Set(context.Background(), k, h.id(0), 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if keys > 1 {
		h.mode = wire.ModeSet
	}
	for j := range behind { // tickets after every waiter's, leases longer than the test
		h.run(h.look(strings.Replace(h.id(j), "a.", "z.", 1), h.ticket+1e12+int64(j), time.Hour))
	}
	return h
}

// id is the place ID of the n-th holder, the Clients alternating: a
// place a release may grant the key (a set's, its keys).
func (h *handoffReplay) id(n int) string {
	if len(h.keys) > 1 {
		return fmt.Sprintf("%c.wis%d", "ab"[n%2], n)
	}
	return fmt.Sprintf("%c.wi%d", "ab"[n%2], n)
}

// op is an op of kind on the replay's key or keys.
func (h *handoffReplay) op(kind wire.Kind, token string, ttl time.Duration) *wire.Op {
	o := wire.NewOp(kind, h.keys[0], token, token, ttl)
	if len(h.keys) > 1 {
		o.Keys, o.Mode = h.keys, h.mode
	}
	return o
}

// look is a waiter's look that joins (or refreshes) its place, as the
// library sends it (Client.queueOp, with the look's number).
func (h *handoffReplay) look(id string, ticket int64, lease time.Duration) *wire.Op {
	o := h.op(wire.OpQueue, "", 0)
	o.Wake, o.Seq = "redlock:wake:", int64(h.n+1)
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
	h.last = r
	return r
}

// step is one hand-off: the next waiter joins, the holder's release
// grants it the key (a set, each key), and it extends the key to the full
// TTL. A set looks once more in between, as one waiting for its grants'
// notices does, and the look that finds its keys granted puts its place
// back in each key's queue (queueMultiSrc), which the set's release takes
// out.
func (h *handoffReplay) step() {
	h.t.Helper()
	holder, next := h.id(h.n), h.id(h.n+1)
	h.ticket++
	h.run(h.look(next, h.ticket, handoffLease))
	o := h.op(wire.OpRelease, holder, 0)
	o.Wake = "redlock:wake:"
	if r, ok := h.run(o).([]any); !ok || len(r) != 2 || r[1] != next {
		h.t.Fatalf("hand-off %d: the release answered %#v, want it to grant %s", h.n, h.last, next)
	}
	if h.mode == wire.ModeSet {
		h.run(h.look(next, h.ticket, handoffLease))
	}
	if r := h.run(h.op(wire.OpExtend, next, 10*time.Second)); r != int64(1) {
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
// twice.) A set of 3 keys runs at most 123 in four scripts (the look
// again, which finds its keys granted; 3 of them renew a grant where a
// millisecond has passed since it); 161-163 until 2026-12-03, when its
// release took its own place out of each key's queue as a leave that
// might hand the key on (TIME, the head, a GET more) where the key was
// held, read the keys again after that, and read the time once per key;
// 142 until 2026-12-04, when a release that granted a set several keys
// read its list of keys at each (grantRest), and each other key's head
// and value, where it now reads the list once, at the last of them, and
// read each key's queue with EXISTS where it now reads the value's
// Queued mark.
func TestHandoffCommands(t *testing.T) {
	n := StartNodes(t, 1)[0]
	for _, tc := range []struct {
		name          string
		keys, scripts int
		want          int
	}{
		{"mutex", 1, 3, 25},
		{"set of 3 keys", 3, 4, 123},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandoffReplay(t, n, tc.keys, 2)
			for range 3 {
				h.step()
			}
			if err := h.admin.ConfigResetStat(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			const steps = 20
			for range steps {
				h.step()
			}
			calls, total := nodeCommands(t, h.admin)
			names := slices.Sorted(maps.Keys(calls))
			if total > tc.want*steps { // (a set's look renews a grant's TTL only where a millisecond passed since it)
				t.Errorf("%.1f commands a hand-off, want at most %d (%v: %v)", float64(total)/steps, tc.want, names, calls)
			}
			if ran := commandStat(t, h.admin, "calls")["evalsha"]; ran != tc.scripts*steps {
				t.Errorf("%d scripts a hand-off, want %d", ran/steps, tc.scripts)
			}
		})
	}
}

// BenchmarkHandoffScripts replays the steady hand-off on one node and
// reports what the node did for each: the commands its scripts ran, and
// the µs it spent in them (INFO commandstats; for instruction counts, run
// the node under callgrind: docs/performance.md). ns/op is the scripts'
// round trips in series from the benchmark's one connection.
//
//	go test ./integration -run '^$' -bench HandoffScripts -count 6
func BenchmarkHandoffScripts(b *testing.B) {
	for _, keys := range []int{1, 3} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) {
			n := StartNodes(b, 1)[0]
			h := newHandoffReplay(b, n, keys, 2)
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
		})
	}
}
