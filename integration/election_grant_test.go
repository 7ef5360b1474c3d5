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

// A candidate's grant announces it (docs/election.md, "Announced by its
// grant"), against real redis-server: each node that granted shows the
// term it handed out, a Leader read believes a term only where a majority
// of nodes show it, and a candidate whose proposal a majority did not take
// proclaims the write-back's term before it leads.

// TestElectionGrantAnnounces: every node that holds the new leader's lock
// shows its term, by grant ("TERM.1~") or confirmed ("TERM.1"), and Leader
// reads it. With no other candidate the proposal is taken everywhere, so
// the term is a proposal (≡ 63 mod 64).
func TestElectionGrantAnnounces(t *testing.T) {
	nodes := StartNodes(t, 5)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	e := newElection(t, newClient(t, Clients(t, nodes, nil)), name)
	ld, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if ld.Term()%64 != 63 {
		t.Fatalf("term %d is not a proposal", ld.Term())
	}
	term := strconv.FormatUint(ld.Term(), 10)
	for i, n := range nodes {
		// Campaign returns at a majority: the last nodes' grants may still
		// be on their way.
		var v string
		waitUntil(t, 30*time.Second, fmt.Sprintf("node %d's grant", i), func() bool {
			var err error
			v, err = Admin(t, n).Get(ctx, RedisKey("election:"+name)).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				t.Fatalf("node %d: %v", i, err)
			}
			return err == nil
		})
		_, meta, _ := strings.Cut(wire.Unmark(v), "\x00")
		if meta != term+".1~ v" && meta != term+".1 v" {
			t.Errorf("node %d shows %q, want term %s", i, meta, term)
		}
	}
	got, err := newElection(t, newClient(t, Clients(t, nodes, nil)), name).Leader(ctx)
	if err != nil || got.Term != ld.Term() || got.Value != "v" {
		t.Fatalf("Leader: %+v, %v; want term %d", got, err, ld.Term())
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionGrantsDisagree: Leader reads what the nodes hold, set by
// hand: one token on all five nodes, announced by grant with terms that
// no majority shares, is no announced leader; three that share one are.
func TestElectionGrantsDisagree(t *testing.T) {
	nodes := StartNodes(t, 5)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	e := newElection(t, newClient(t, Clients(t, nodes, nil)), name)
	set := func(terms ...string) {
		for i, n := range nodes {
			if err := Admin(t, n).Set(ctx, RedisKey("election:"+name), "tok\x00"+terms[i]+".1~ v", 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	set("127", "127", "128", "130", "193")
	if got, err := e.Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader believed grants that disagree: %+v, %v", got, err)
	}
	set("127", "127", "128", "127", "193")
	if got, err := e.Leader(ctx); err != nil || got.Term != 127 || got.Value != "v" {
		t.Fatalf("Leader: %+v, %v; want term 127", got, err)
	}
}

// TestElectionWriteBackTerm: three of five nodes' counters are ahead of
// any proposal, so two take the candidate's proposal and three hand out
// counters of their own. Between the grants and the proclamation (read
// from the candidate's observer, which runs before Campaign goes on), no
// term shows on a majority, and Leader reports none: neither the proposal
// nor one node's counter. The term is the largest, written back, and the
// candidate proclaims it before Campaign returns: every read after shows
// it, on a majority of nodes.
func TestElectionWriteBackTerm(t *testing.T) {
	nodes := StartNodes(t, 5)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	const ahead = 1 << 52
	for _, n := range nodes[:3] {
		if err := Admin(t, n).Set(ctx, RedisKey("election:"+name)+":fence", ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	reader := newElection(t, newClient(t, Clients(t, nodes, nil)), name)
	var read []error // the Leader reads made between a won acquisition and its proclamation
	granted := redlock.Observer(func(ev redlock.Event) {
		if ev.Kind == redlock.EventAcquire && ev.Err == nil {
			_, err := reader.Leader(ctx)
			read = append(read, err)
		}
	})
	e := newElection(t, newClient(t, Clients(t, nodes, nil), redlock.WithObserver(granted)), name)
	ld, err := e.Campaign(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || !errors.Is(read[0], redlock.ErrNoLeader) {
		t.Fatalf("Leader between the grants and the proclamation: %v, want one ErrNoLeader", read)
	}
	if ld.Term() <= ahead || ld.Term()%64 == 63 {
		t.Fatalf("term %d: not a counter above %d", ld.Term(), uint64(ahead))
	}
	proclaimed := 0
	for _, n := range nodes {
		v, _ := Admin(t, n).Get(ctx, RedisKey("election:"+name)).Result()
		if _, meta, _ := strings.Cut(wire.Unmark(v), "\x00"); meta == strconv.FormatUint(ld.Term(), 10)+".1 v" {
			proclaimed++
		}
	}
	if proclaimed < 3 {
		t.Fatalf("the term is proclaimed on %d nodes", proclaimed)
	}
	got, err := e.Leader(ctx)
	if err != nil || got.Term != ld.Term() {
		t.Fatalf("Leader: %+v, %v; want term %d", got, err, ld.Term())
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestElectionGrantedByResign: a resignation grants the key to the first
// waiting candidate, which leads without an attempt of its own. Its looks
// keep its value on every node (KEY:val:ID); the release sets the key to
// the candidate's place ID with the releaser's proposal as the term and
// that value ("TERM.1~ b"), publishes the term on the leader channel, and
// drops the kept value. Leader then reads the candidate, in a term above
// its predecessor's.
func TestElectionGrantedByResign(t *testing.T) {
	nodes := StartNodes(t, 5)
	name := UniqueKey(t, nodes)
	key := RedisKey("election:" + name)
	ctx := t.Context()
	first, err := newElection(t, newClient(t, Clients(t, nodes, nil)), name).Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	sub := Admin(t, nodes[0]).Subscribe(ctx, key+":leader")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	got := make(chan *redlock.Leadership, 1)
	go func() {
		ld, err := newElection(t, newClient(t, Clients(t, nodes, nil)), name).Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		got <- ld
	}()
	var id string // the candidate's place, queued on every node with its value kept
	waitUntil(t, 30*time.Second, "the candidate's place and value on every node", func() bool {
		for _, n := range nodes {
			ids, _ := Admin(t, n).ZRange(ctx, key+":queue", 0, 0).Result()
			if len(ids) == 0 || !strings.Contains(ids[0], ".wie") {
				return false
			}
			id = ids[0]
			if v, _ := Admin(t, n).Get(ctx, key+":val:"+id).Result(); v != "0.0 b" {
				return false
			}
		}
		return true
	})
	if err := first.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil {
		t.FailNow()
	}
	if tok := next.Lock().Token(); tok != id {
		t.Fatalf("the next leader holds with %q, not its place %q: it was not granted by the resignation", tok, id)
	}
	if next.Term() <= first.Term() || next.Term()%64 != 63 {
		t.Fatalf("term %d after %d: not a proposal above it", next.Term(), first.Term())
	}
	term := strconv.FormatUint(next.Term(), 10)
	// The leader channel carries the term node 0 granted the candidate.
	// Under load the candidate may be woken on some node instead and
	// attempt there, in a term of its own proposal, which it then leads
	// in (CI beside a CPU hog, once): node 0 then announces both, the
	// resignation's term first, never one above the term it leads in.
	heard, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		msg, err := sub.ReceiveMessage(heard)
		if err != nil {
			t.Fatalf("leader channel: %v; want the term %s", err, term)
		}
		if msg.Payload == term {
			break
		}
		if n, err := strconv.ParseUint(msg.Payload, 10, 64); err != nil || n > next.Term() {
			t.Fatalf("leader channel: %q; want terms up to %s", msg.Payload, term)
		}
	}
	granted := 0
	for _, n := range nodes {
		v, _ := Admin(t, n).Get(ctx, key).Result()
		tok, meta, _ := strings.Cut(wire.Unmark(v), "\x00")
		if tok == id && (meta == term+".1~ b" || meta == term+".1 b") {
			granted++
			if n, _ := Admin(t, n).Exists(ctx, key+":val:"+id).Result(); n != 0 {
				t.Errorf("the granted candidate's value is still kept")
			}
		}
	}
	if granted < 3 {
		t.Fatalf("%d nodes show the candidate with term %s", granted, term)
	}
	ld, err := newElection(t, newClient(t, Clients(t, nodes, nil)), name).Leader(ctx)
	if err != nil || ld.Term != next.Term() || ld.Value != "b" {
		t.Fatalf("Leader: %+v, %v; want b in term %s", ld, err, term)
	}
	if err := next.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}
