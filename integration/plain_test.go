package integration

import (
	"context"
	"errors"
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

// TestUncontendedAcquireIsOneSet: with default options, an uncontended
// TryLock sends each node one SET (NX PX) and no script, once the
// node's connection has run a script (its first acquire is the script, so
// that a node that refuses scripts refuses the lock); Unlock is one
// EVALSHA, which runs no EXISTS for the key's queue: the holder's value
// would say if the queue had places (wire.Queued). A connection is
// renewed every 4 s, and each renewal's first acquire is a script again
// (whose free-key path does look for a queue), so a slow machine may see
// a few.
func TestUncontendedAcquireIsOneSet(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0]) // the counts must be this test's alone
	c := newClient(t, Clients(t, nodes, nil))
	const cycles = 20
	for i, calls := range countedCycles(t, nodes, c, cycles, nil) {
		n := nodes[i]
		scripted := calls["evalsha"] + calls["eval"] - cycles // less the releases
		// A script's own commands are counted too: a scripted acquire's SET is among the SETs.
		plain := calls["set"] - scripted
		if plain+scripted != cycles || plain < cycles-5 {
			t.Errorf("%s: %d plain acquires and %d scripted ones in %d cycles; want them all but a few plain (%v)", n.Addr, plain, scripted, cycles, calls)
		}
		if calls["exists"] > scripted {
			t.Errorf("%s: %d EXISTS in %d cycles with %d scripted acquires: the releases looked for a queue (%v)", n.Addr, calls["exists"], cycles, scripted, calls)
		}
	}
}

// TestPlainAcquireKeepsTheQueue: a release that finds a live place in the
// key's queue leaves the key Reserved on each node, so that an uncontended
// acquire (a plain SET NX, which never reads the queue) is refused until
// the first waiter takes the key; the releaser's own next TryLock too, a
// fenced one (whose uncontended path is a plain SET NX beside a ZADD), and
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
		runOp(t, nodes, &wire.Op{Kind: wire.OpQueue, Key: RedisKey(key), Place: &wire.Place{ID: "zz.1", Ticket: 1, Lease: time.Minute}, Quiet: quiet})
	}
	place(false)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes { // Unlock returns at a majority: wait for the rest
		waitUntil(t, 30*time.Second, "the release on "+n.Addr, func() bool {
			v, err := Admin(t, n).Get(ctx, RedisKey(key)).Result()
			if err != nil || !wire.IsReserved(v) && wire.Unmark(v) != l.Token() {
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

// TestLookKeepsTheReservation: a waiter's look that finds the key
// reserved for a waiter ahead of it keeps the key reserved for as long as
// its own place lasts, not only the first place's lease. So a first
// waiter whose place lapses (its process died) leaves the key kept for the
// waiter behind it, and an uncontended acquire that comes before that
// waiter's next look is refused. Until 2026-11-27 the reservation lapsed
// with the first place, and a plain SET NX took the key in that instant
// (the simulator's seed 126807, a waiter cut off).
func TestLookKeepsTheReservation(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	ctx := t.Context()
	a := newClient(t, Clients(t, nodes, nil))
	newcomer := newClient(t, Clients(t, nodes, nil))
	warm, err := newcomer.TryLock(ctx, UniqueKey(t, nodes)) // its connections' first acquire is a script, which reads the queue
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	place := func(id string, ticket int64, lease time.Duration) {
		t.Helper()
		runOp(t, nodes, &wire.Op{Kind: wire.OpQueue, Key: RedisKey(key), Place: &wire.Place{ID: id, Ticket: ticket, Lease: lease}, Quiet: lease == 0})
	}
	const lease = time.Second
	placed := time.Now()
	place("zz.1", 1, lease) // first, and soon gone: nobody refreshes it
	place("zz.2", 2, time.Minute)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes { // Unlock returns at a majority: wait for the rest
		waitUntil(t, 30*time.Second, "the release on "+n.Addr, func() bool {
			v, err := Admin(t, n).Get(ctx, RedisKey(key)).Result()
			return err == nil && wire.IsReserved(v)
		})
	}
	place("zz.2", 2, time.Minute) // zz.2's look, while the key is reserved for zz.1
	for _, n := range nodes {
		if pttl := Admin(t, n).PTTL(ctx, RedisKey(key)).Val(); pttl <= lease {
			t.Fatalf("%s: the key is reserved for %v after zz.2's look, want zz.2's lease (a minute)", n.Addr, pttl)
		}
	}
	// zz.1's place lapses. Were the machine so slow that it lapsed before
	// zz.2's look, that look reserved the key for zz.2 as first: refused
	// either way.
	time.Sleep(time.Until(placed.Add(lease + 100*time.Millisecond)))
	if l, err := newcomer.TryLock(ctx, key); !errors.Is(err, redlock.ErrNotObtained) {
		if l != nil {
			_ = l.Unlock(context.WithoutCancel(ctx))
		}
		t.Fatalf("TryLock once the first place lapsed, with a waiter behind it: %v, want ErrNotObtained", err)
	}
	place("zz.2", 0, 0) // the last place leaves: the key goes
	l, err = newcomer.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock with the queue gone: %v", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes, key, 30*time.Second)
}

// TestLeaveShortensTheReservation: a reservation that a waiter's look
// made as long as its own place is cut back when that waiter leaves, even
// while readers hold the read-write lock (no look reserves then), so that
// it never outlives the places left in the queue. The simulator found it
// missing (seed 126542: a key reserved after every Client had closed).
func TestLeaveShortensTheReservation(t *testing.T) {
	nodes := StartNodes(t, 1)
	admin := Admin(t, nodes[0])
	key := RedisKey("rw:" + UniqueKey(t, nodes))
	ctx := t.Context()
	run := func(o *wire.Op) { t.Helper(); runOp(t, nodes, o) }
	place := func(o *wire.Op, id string, ticket int64, lease time.Duration) *wire.Op {
		o.Place = &wire.Place{ID: id, Ticket: ticket, Lease: lease}
		return o
	}
	look := func(id string, ticket int64, lease time.Duration, mode wire.Mode) {
		t.Helper()
		run(place(&wire.Op{Kind: wire.OpQueue, Key: key, Mode: mode, Quiet: ticket == 0}, id, ticket, lease))
	}
	look("zz.r1", 1, time.Second, wire.ModeRead) // a reader first: the free key reserved for it
	look("zz.3", 3, time.Second, wire.ModeWrite) // a writer behind it
	look("zz.2", 2, time.Minute, wire.ModeWrite) // and one before that, whose look reserves for its minute
	read := wire.NewOp(wire.OpAcquire, key, "r1", "r1", time.Minute)
	read.Mode = wire.ModeRead
	run(place(read, "zz.r1", 1, time.Second)) // the reader is let in, and holds
	if pttl := admin.PTTL(ctx, key).Val(); pttl <= time.Second {
		t.Fatalf("the reservation after the reader's entry: %v, want the writer's minute still", pttl)
	}
	look("zz.2", 0, 0, wire.ModeWrite) // the writer with the minute leaves, while the reader holds
	if pttl := admin.PTTL(ctx, key).Val(); pttl > time.Second {
		t.Fatalf("the reservation after its writer left: %v, want zz.3's second at most", pttl)
	}
	look("zz.3", 0, 0, wire.ModeWrite) // the last place leaves: the key goes
	if n := admin.Exists(ctx, key).Val(); n != 0 {
		t.Fatalf("the key after the last place left: %d, want none", n)
	}
}

// runOp runs o (with the default wake prefix) on every node, as the
// library would send it.
func runOp(t *testing.T, nodes []*Node, o *wire.Op) {
	t.Helper()
	o.Wake = "redlock:wake:"
	o.Encode()
	for _, n := range nodes {
		if err := Admin(t, n).Do(t.Context(), o.EvalArgs(0)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
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
	runOp(t, nodes, &wire.Op{Kind: wire.OpQueue, Key: slot, Place: &wire.Place{ID: "zz.1", Ticket: 1, Lease: time.Minute}})
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

// TestQueuedMarkIsTheNodesOwn: a waiter's place in a held key's queue
// marks the holder's value on every node (wire.Queued), which is what
// its release reads to find the queue; Inspect still shows the holder's
// metadata as it was set, and the release hands the key to the waiter.
func TestQueuedMarkIsTheNodesOwn(t *testing.T) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	ctx := t.Context()
	a := newClient(t, Clients(t, nodes, nil), redlock.WithMetadata("host-a"))
	b := newClient(t, Clients(t, nodes, nil))
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if v, _ := Admin(t, n).Get(ctx, RedisKey(key)).Result(); wire.IsQueued(v) {
			t.Fatalf("%s: %q marked before anyone waited", n.Addr, v)
		}
	}
	got := make(chan error, 1)
	go func() {
		wl, err := b.Lock(ctx, key)
		if err == nil {
			err = wl.Unlock(context.Background())
		}
		got <- err
	}()
	for _, n := range nodes {
		waitUntil(t, 30*time.Second, "the waiter's mark on "+n.Addr, func() bool {
			v, _ := Admin(t, n).Get(ctx, RedisKey(key)).Result()
			return wire.IsQueued(v) && wire.Unmark(v) == l.Token()+"\x00host-a"
		})
	}
	st, err := a.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range st.Nodes {
		if !ns.Held || ns.Metadata != "host-a" || ns.Holder != st.Nodes[0].Holder {
			t.Errorf("%s: held %v by %q with metadata %q, want held by %q with %q", ns.Node, ns.Held, ns.Holder, ns.Metadata, st.Nodes[0].Holder, "host-a")
		}
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}

// TestUncontendedSetIsOneScriptPerNode: an uncontended multi-key
// TryLock+Unlock runs, on each node, one script for the acquire and one
// for the release, and the release reads no queue (a key's value says
// whether one may wait: wire.Queued): per key a GET and a SET, then a GET
// and a DEL, and no EXISTS (the acquire's TIME is its keys' one expiry).
// Until 2026-12-04 the set's release ran an EXISTS per key.
func TestUncontendedSetIsOneScriptPerNode(t *testing.T) {
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0]) // the counts must be this test's alone
	c := newClient(t, Clients(t, nodes, nil))
	const cycles, keys = 20, 3
	try := func(ctx context.Context, keys []string) (*redlock.Lock, error) {
		m, err := c.MultiLock(keys)
		if err != nil {
			return nil, err
		}
		return m.TryLock(ctx)
	}
	for i, calls := range countedCyclesOf(t, nodes, c, keys, cycles, try, nil) {
		calls["evalsha"] += calls["eval"] // (a script sent in full once, where a node had not cached it)
		want := map[string]int{"evalsha": 2 * cycles, "get": 2 * keys * cycles, "set": keys * cycles, "del": keys * cycles, "exists": 0}
		for name, n := range want {
			if calls[name] != n {
				t.Errorf("%s: %d %s in %d cycles of %d keys, want %d (%v)", nodes[i].Addr, calls[name], name, cycles, keys, n, calls)
			}
		}
	}
}
