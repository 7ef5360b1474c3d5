package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/wire"
)

// The uncontended acquire as a plain SET NX (wire.OpAcquirePlain), against
// real redis-server: what each node is sent, and that it never jumps a
// wait queue, because a release that finds a queue leaves the key
// Reserved for it.

// commandCalls returns how many times node n ran each command since its
// stats were last reset (INFO commandstats).
func commandCalls(t *testing.T, n *Node) map[string]int {
	t.Helper()
	info, err := Admin(t, n).Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		count, _, _ := strings.Cut(rest, ",")
		calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(count)
	}
	return calls
}

// TestUncontendedAcquireIsOneSet: with default options, an uncontended
// TryLock sends each node one SET (NX PX) and no script, once the
// node's connection has run a script (its first acquire is the script, so
// that a node that refuses scripts refuses the lock); Unlock is one
// EVALSHA. A connection is renewed every 4 s, and each renewal's first
// acquire is a script again, so a slow machine may see a few.
func TestUncontendedAcquireIsOneSet(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0]) // the counts must be this test's alone
	c := newClient(t, Clients(t, nodes, nil))
	ctx := t.Context()
	cycle := func(key string) {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The connections' first scripts. A cycle returns at a majority: the
	// counts below start once its release has reached every node.
	first := UniqueKey(t, nodes)
	cycle(first)
	waitEmpty(t, nodes, first, 10*time.Second)
	for _, n := range nodes {
		if err := Admin(t, n).ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const cycles = 20
	for i := range cycles {
		cycle(fmt.Sprintf("%s-%d", UniqueKey(t, nodes), i))
	}
	// Close waits for the calls still on their way to the slowest node.
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		calls := commandCalls(t, n)
		set, scripted := calls["set"], calls["evalsha"]+calls["eval"]-cycles // less the releases
		if set+scripted != cycles || set < cycles-5 {
			t.Errorf("%s: %d plain acquires and %d scripted ones in %d cycles; want them all but a few plain (%v)", n.Addr, set, scripted, cycles, calls)
		}
	}
}

// TestPlainAcquireKeepsTheQueue: a release that finds a live place in the
// key's queue leaves the key Reserved on each node, so that an uncontended
// acquire (a plain SET NX, which never reads the queue) is refused until
// the first waiter takes the key; the releaser's own next TryLock too, a
// fenced one (whose uncontended path is a SET NX inside its script), and
// an unqueued multi-key attempt over the key (whose script reads the
// queues only when one of its keys is reserved). When the last place
// leaves, the key goes. Without the reservation, the newcomer would be
// granted the key ahead of the waiter.
func TestPlainAcquireKeepsTheQueue(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	ctx := t.Context()
	a := newClient(t, Clients(t, nodes, nil))
	newcomer := newClient(t, Clients(t, nodes, nil))
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter with the lowest ticket, in every node's queue: a place as a
	// waiting Lock has, without a Lock call to take the key when woken.
	place := func(quiet bool) {
		t.Helper()
		o := &wire.Op{Kind: wire.OpQueue, Key: RedisKey(key), Place: &wire.Place{ID: "zz.1", Ticket: 1, Lease: time.Minute}, Quiet: quiet, Wake: "redlock:wake:"}
		o.Encode()
		for _, n := range nodes {
			if err := Admin(t, n).Do(ctx, o.EvalArgs(0)...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	place(false)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes { // Unlock returns at a majority: wait for the rest
		waitUntil(t, 30*time.Second, "the release on "+n.Addr, func() bool {
			v, err := Admin(t, n).Get(ctx, RedisKey(key)).Result()
			if err != nil || !wire.IsReserved(v) && v != l.Token() {
				t.Fatalf("%s: the released key is %q (%v), want it reserved for the queue", n.Addr, v, err)
			}
			return wire.IsReserved(v)
		})
	}
	st, err := a.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range st.Nodes {
		if ns.Held || ns.Waiting != 1 || ns.FirstWaiter != "zz.1" {
			t.Fatalf("Inspect: %+v; want the key free and zz.1 waiting first", ns)
		}
	}
	set, err := newcomer.MultiLock([]string{key, UniqueKey(t, nodes)})
	if err != nil {
		t.Fatal(err)
	}
	tries := map[string]func(context.Context) (*redlock.Lock, error){
		"the newcomer's": func(ctx context.Context) (*redlock.Lock, error) { return newcomer.TryLock(ctx, key) },
		"the releaser's": func(ctx context.Context) (*redlock.Lock, error) { return a.TryLock(ctx, key) },
		"a set's":        set.TryLock,
		"a fenced one's": func(ctx context.Context) (*redlock.Lock, error) {
			return newcomer.TryLock(ctx, key, redlock.WithFencing())
		},
	}
	for name, try := range tries {
		if l, err := try(ctx); !errors.Is(err, redlock.ErrNotObtained) {
			if l != nil {
				_ = l.Unlock(context.WithoutCancel(ctx))
			}
			t.Fatalf("%s TryLock while a waiter is first: %v, want ErrNotObtained", name, err)
		}
	}
	place(true)
	for _, n := range nodes {
		if err := Admin(t, n).Get(ctx, RedisKey(key)).Err(); !errors.Is(err, redis.Nil) {
			t.Fatalf("%s: the key after its last place left: %v, want none", n.Addr, err)
		}
	}
	for _, name := range []string{"a set's", "the newcomer's"} {
		l, err = tries[name](ctx)
		if err != nil {
			t.Fatalf("%s TryLock with the queue gone: %v", name, err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	waitEmpty(t, nodes, key, 30*time.Second)
}

// TestFencedSweepReadsTheQueue: a semaphore's sweep never jumps a slot's
// queue, fenced or not, even where the slot's key is free without a
// reservation (a holder's key that expired, before the next look). A
// fenced mutex's first attempt may take such a key (its uncontended
// grant reads no queue, as the plain SET NX does); a sweep sends an
// empty place to keep off that path (wire.NotQueued).
func TestFencedSweepReadsTheQueue(t *testing.T) {
	nodes := StartNodes(t, 3)
	name := UniqueKey(t, nodes)
	slot := RedisKey("sem:" + name + ":0")
	ctx := t.Context()
	o := &wire.Op{Kind: wire.OpQueue, Key: slot, Place: &wire.Place{ID: "zz.1", Ticket: 1, Lease: time.Minute}, Wake: "redlock:wake:"}
	o.Encode()
	for _, n := range nodes {
		if err := Admin(t, n).Do(ctx, o.EvalArgs(0)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			Admin(t, n).Del(context.WithoutCancel(ctx), slot, slot+":queue", slot+":lease", slot+":fence")
		}
	})
	c := newClient(t, Clients(t, nodes, nil))
	for _, opts := range [][]redlock.Option{nil, {redlock.WithFencing()}} {
		s, err := c.Semaphore(name, 1, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			Admin(t, n).Del(ctx, slot) // the look (or a refusal) reserved it: free, with a live place
		}
		if l, err := s.TryAcquire(ctx); !errors.Is(err, redlock.ErrNotObtained) {
			if l != nil {
				_ = l.Unlock(context.WithoutCancel(ctx))
			}
			t.Fatalf("TryAcquire (%d options) while zz.1 waits first: %v, want ErrNotObtained", len(opts), err)
		}
	}
}
