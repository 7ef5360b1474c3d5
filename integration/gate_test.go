package integration

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/wire"
)

// The queue's gate on real redis-server, op by op: a queued waiter is
// first where its place heads the queue or where its ticket comes before
// the head's (a node that lost its place), ties ordered by ID as the queue
// orders them; a waiter granted leaves no place and costs no enqueue; one
// refused has its place put back where its ticket says. For the mutex, a
// reader and a multi-key set.

const gateLease = 5 * time.Second

// gateOp runs o on n and returns its reply.
func gateOp(t *testing.T, n *Node, o *wire.Op) any {
	t.Helper()
	o.Encode()
	r, err := Admin(t, n).Do(t.Context(), o.EvalArgs(0)...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("%v: %v", o.Kind, err)
	}
	return r
}

// placed gives o the waiter's place.
func placed(o *wire.Op, id string, ticket int64) *wire.Op {
	o.Place = &wire.Place{ID: id, Ticket: ticket, Lease: gateLease}
	return o
}

// look queues (or refreshes) the waiter id on rkey, as a look does.
func look(t *testing.T, n *Node, rkey, id string, ticket int64, mode wire.Mode) {
	t.Helper()
	gateOp(t, n, placed(&wire.Op{Kind: wire.OpQueue, Key: rkey, Mode: mode, Wake: "redlock:wake:"}, id, ticket))
}

// wantQueue fails unless rkey's queue on n is want, first first.
func wantQueue(t *testing.T, n *Node, rkey string, want ...string) {
	t.Helper()
	got, err := Admin(t, n).ZRange(t.Context(), rkey+":queue", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("queue of %s: %q, want %q", rkey, got, want)
	}
}

// wantGranted fails unless reply is a grant (1); wantRefusedBy unless it
// is the queue's refusal naming head.
func wantGranted(t *testing.T, what string, reply any) {
	t.Helper()
	if reply != int64(1) {
		t.Fatalf("%s: %#v, want granted (1)", what, reply)
	}
}

// wantGrantedFree is wantGranted for a grant that ran no ZADD on n
// since the last zadds: no place put in the queue only to be taken out.
func wantGrantedFree(t *testing.T, n *Node, what string, reply any) {
	t.Helper()
	wantGranted(t, what, reply)
	if z := zadds(t, n); z != 0 {
		t.Errorf("%s: the grant ran %d ZADDs, want none", what, z)
	}
}

func wantRefusedBy(t *testing.T, what string, reply any, head string) {
	t.Helper()
	r, ok := reply.([]any)
	if !ok || len(r) != 3 || r[2] != head {
		t.Fatalf("%s: %#v, want the queue's refusal naming %s", what, reply, head)
	}
}

// zadds is how many ZADDs n ran since the last call.
func zadds(t *testing.T, n *Node) int {
	t.Helper()
	z := commandCalls(t, n)["zadd"]
	if err := Admin(t, n).ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return z
}

func TestGateByTicket(t *testing.T) {
	n := StartNodes(t, 1)[0]
	ttl := 10 * time.Second
	t.Run("mutex", func(t *testing.T) {
		k := RedisKey(UniqueKey(t, []*Node{n}))
		acq := func(token, id string, ticket int64) any {
			return gateOp(t, n, placed(wire.NewOp(wire.OpAcquire, k, token, token, ttl), id, ticket))
		}
		release := func(token string) {
			gateOp(t, n, &wire.Op{Kind: wire.OpRelease, Key: k, Token: token, Wake: "redlock:wake:"})
		}
		look(t, n, k, "b.1", 200, wire.ModeMutex)
		zadds(t, n)
		// a.1's place is lost on this node; its ticket comes first.
		wantGrantedFree(t, n, "a waiter whose ticket comes before the head's", acq("ta", "a.1", 100))
		wantQueue(t, n, k, "b.1")
		release("ta")
		wantRefusedBy(t, "a waiter behind the head", acq("tc", "c.1", 300), "b.1")
		wantQueue(t, n, k, "b.1", "c.1") // put back where its ticket says
		// Ties are ordered by ID, as the queue orders them.
		wantGranted(t, "a tie with the head, its ID first", acq("t0", "a0.1", 200))
		wantQueue(t, n, k, "b.1", "c.1")
		release("t0")
		wantRefusedBy(t, "a tie with the head, its ID after", acq("t9", "z9.1", 200), "b.1")
		wantQueue(t, n, k, "b.1", "z9.1", "c.1")
		zadds(t, n)
		wantGrantedFree(t, n, "the head", acq("tb", "b.1", 200))
		wantQueue(t, n, k, "z9.1", "c.1")
	})
	t.Run("reader", func(t *testing.T) {
		k := RedisKey("rw:" + UniqueKey(t, []*Node{n}))
		racq := func(token, id string, ticket int64) any {
			return gateOp(t, n, placed(&wire.Op{Kind: wire.OpAcquire, Mode: wire.ModeRead, Key: k, Token: token, TTL: ttl}, id, ticket))
		}
		look(t, n, k, "w.1", 200, wire.ModeWrite)
		wantGranted(t, "a reader ahead of the waiting writer, its place lost", racq("r1", "a.r1", 100))
		wantQueue(t, n, k, "w.1")
		look(t, n, k, "b.r2", 300, wire.ModeRead)
		zadds(t, n)
		wantRefusedBy(t, "a reader behind the waiting writer", racq("r2", "b.r2", 300), "w.1")
		if z := zadds(t, n); z != 2 {
			t.Errorf("the refused reader's place: %d ZADDs, want 2 (its refresh)", z)
		}
		wantQueue(t, n, k, "w.1", "b.r2")
	})
	t.Run("set", func(t *testing.T) {
		base := RedisKey(UniqueKey(t, []*Node{n}))
		k1, k2 := base+"a", base+"b"
		sacq := func(token, id string, ticket int64) any {
			return gateOp(t, n, placed(&wire.Op{Kind: wire.OpAcquire, Mode: wire.ModeSet, Key: k1, Keys: []string{k1, k2}, Token: token, Value: token, TTL: ttl}, id, ticket))
		}
		look(t, n, k1, "b.1", 200, wire.ModeMutex)
		zadds(t, n)
		wantGrantedFree(t, n, "a set whose ticket comes first on every key", sacq("s1", "a.1", 100))
		wantQueue(t, n, k1, "b.1")
		wantQueue(t, n, k2)
		// Refused (a.1 holds both keys): its place is put back on each key.
		if r, ok := sacq("s3", "c.1", 300).([]any); !ok || r[1] != "s1" {
			t.Fatalf("a set while another holds its keys: %#v, want refused naming s1", r)
		}
		wantQueue(t, n, k1, "b.1", "c.1")
		wantQueue(t, n, k2, "c.1")
	})
}
