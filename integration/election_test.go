package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// Leader election against real redis-server: hand-over on resignation in
// campaign order, failover after a leader is cut off (never before its
// validity ended), the leader read and observed in term order, and a chaos
// run with candidates and nodes failing at random.

func newElection(t testing.TB, c *redlock.Client, name string, opts ...redlock.Option) *redlock.Election {
	t.Helper()
	e, err := c.Election(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestElectionHandover: three candidates in three Clients lead in the
// order they campaigned, each in a larger term; Leader and an observer in
// a fourth Client see each of them, in term order, with the values they
// proclaim.
func TestElectionHandover(t *testing.T) {
	nodes := StartNodes(t, 5)
	name := UniqueKey(t, nodes)
	ctx := t.Context()
	var es []*redlock.Election
	for range 4 {
		es = append(es, newElection(t, newClient(t, Clients(t, nodes, nil)), name))
	}
	seen := es[3].Observe(ctx)
	first, err := es[0].Campaign(ctx, "c0")
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *redlock.Leadership, 2)
	for i := 1; i <= 2; i++ {
		go func() {
			ld, err := es[i].Campaign(ctx, fmt.Sprintf("c%d", i))
			if err != nil {
				t.Error(err)
			}
			next <- ld
		}()
		waitQueued(t, nodes, "election:"+name, i) // campaign order
	}
	if err := first.Proclaim(ctx, "c0 again"); err != nil {
		t.Fatal(err)
	}
	want := []redlock.Leader{{Value: "c0", Term: first.Term()}, {Value: "c0 again", Term: first.Term()}}
	ld := first
	for i := 1; i <= 2; i++ {
		if err := ld.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		n := <-next
		if n == nil {
			t.FailNow()
		}
		if v := n.Value(); v != fmt.Sprintf("c%d", i) {
			t.Fatalf("%s leads after c%d resigned, want c%d", v, i-1, i)
		}
		if n.Term() <= ld.Term() {
			t.Fatalf("term %d after term %d", n.Term(), ld.Term())
		}
		got, err := es[0].Leader(ctx)
		if err != nil || got.Value != n.Value() || got.Term != n.Term() {
			t.Fatalf("Leader = %+v, %v; want %s in term %d", got, err, n.Value(), n.Term())
		}
		want = append(want, redlock.Leader{Value: n.Value(), Term: n.Term()})
		ld = n
	}
	// The observer may skip a leader it was too slow to take, never
	// reorder: what it saw is want in order, ending with the last.
	var got []redlock.Leader
	waitUntil(t, 10*time.Second, "the observer sees the last leader", func() bool {
		select {
		case l := <-seen:
			got = append(got, redlock.Leader{Value: l.Value, Term: l.Term})
		case <-time.After(10 * time.Millisecond):
		}
		return len(got) > 0 && got[len(got)-1] == want[len(want)-1]
	})
	j := 0
	for _, l := range got {
		for j < len(want) && want[j] != l {
			j++
		}
		if j == len(want) {
			t.Fatalf("observed %+v, not a subsequence of %+v", got, want)
		}
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := es[0].Leader(ctx); !errors.Is(err, redlock.ErrNoLeader) {
		t.Fatalf("Leader after the last resignation: %v, want ErrNoLeader", err)
	}
}

// TestElectionFailover: a leader cut off from every node (as a dead
// process would be) stops leading (Done) before its validity runs out,
// and the standby leads once the leader's keys have run out: never before
// the old leadership's validity ended.
func TestElectionFailover(t *testing.T) {
	nodes := StartNodes(t, 5)
	proxies := ProxyNodes(t, nodes)
	via := Reach(proxies)
	name := UniqueKey(t, nodes)
	const ttl = 500 * time.Millisecond
	opts := []redlock.Option{redlock.WithTTL(ttl)}
	leaderE := newElection(t, newClient(t, Clients(t, via, func(o *redis.Options) { o.DialerRetries = 1 }), redlock.WithNodeTimeout(25*time.Millisecond)), name, opts...)
	standbyE := newElection(t, newClient(t, Clients(t, nodes, nil)), name, opts...)
	ctx := t.Context()
	ld, err := leaderE.Campaign(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		ld *redlock.Leadership
		at time.Time
	}
	next := make(chan result, 1)
	go func() {
		n, err := standbyE.Campaign(ctx, "new")
		if err != nil {
			t.Error(err)
		}
		next <- result{n, time.Now()}
	}()
	waitQueued(t, nodes, "election:"+name, 1)
	time.Sleep(2 * ttl) // extended meanwhile
	if err := ld.Lock().Err(); err != nil {
		t.Fatalf("the leadership ended while its nodes were reachable: %v", err)
	}
	validUntil := time.Now().Add(ld.Lock().Validity())
	for _, p := range proxies {
		p.Partition(t)
	}
	defer func() {
		for _, p := range proxies {
			p.Heal(t)
		}
	}()
	select {
	case <-ld.Lock().Done():
	case <-time.After(time.Minute):
		t.Fatal("the cut-off leader still leads")
	}
	if !errors.Is(ld.Lock().Err(), redlock.ErrExpired) {
		t.Fatalf("the leadership ended with %v, want ErrExpired", ld.Lock().Err())
	}
	n := <-next
	if n.ld == nil {
		t.FailNow()
	}
	if n.at.Before(validUntil) {
		t.Fatalf("the standby led %v before the old leadership's validity ended", validUntil.Sub(n.at))
	}
	if n.ld.Term() <= ld.Term() {
		t.Fatalf("term %d after term %d", n.ld.Term(), ld.Term())
	}
	got, err := standbyE.Leader(ctx)
	if err != nil || got.Value != "new" {
		t.Fatalf("Leader = %+v, %v", got, err)
	}
}

// TestChaosElection: five candidates, each in its own Client reaching the
// nodes through proxies of its own, campaign, lead for 0–100 ms (one time
// in five 400 ms, extended meanwhile) and
// resign, over and over, while a candidate is cut off from every node at
// random (its leadership, if any, must end before another begins; its
// places in the queue lapse) and nodes are paused or killed and restarted
// from their AOF. The chaos checker sees each leadership as a holding with
// its term as the fencing token: no two overlap, terms strictly increase
// and are never shared. Two observers must see terms in order.
func TestChaosElection(t *testing.T) {
	nodes := StartNodesPersistent(t, 5)
	needsOwnServers(t, nodes[0])
	name := UniqueKey(t, nodes)
	const ttl = 500 * time.Millisecond
	opts := []redlock.Option{redlock.WithTTL(ttl), redlock.WithNodeTimeout(25 * time.Millisecond)}
	chk := &checker{}
	target := chaosTarget() / 16
	var done atomic.Int64
	stop := make(chan struct{})
	deadline := chaosDeadline(3 * time.Minute)

	// Observers, in Clients of their own that reach the nodes directly.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	observed := make([][]redlock.Leader, 2)
	var obs sync.WaitGroup
	for i := range observed {
		e := newElection(t, newClient(t, Clients(t, nodes, func(o *redis.Options) { o.DialerRetries = 1 }), opts...), name)
		seen := e.Observe(ctx)
		obs.Go(func() {
			for l := range seen {
				observed[i] = append(observed[i], l)
			}
		})
	}

	// Candidates.
	var cut [5][]*Proxy
	var wg sync.WaitGroup
	for w := range cut {
		proxies := ProxyNodes(t, nodes)
		cut[w] = proxies
		via := Reach(proxies)
		e := newElection(t, newClient(t, Clients(t, via, func(o *redis.Options) { o.DialerRetries = 1 }), opts...), name)
		who := fmt.Sprintf("candidate%d", w)
		wg.Go(func() {
			for i := 0; done.Load() < int64(target) && time.Now().Before(deadline); i++ {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				began := time.Now()
				ld, err := e.Campaign(cctx, who)
				ccancel()
				if err != nil {
					continue
				}
				from := time.Now()
				until := from.Add(ld.Lock().Validity())
				d := time.Duration(rand.IntN(100)) * time.Millisecond
				if rand.IntN(5) == 0 {
					d = 400 * time.Millisecond // extended on the way
				}
				end := time.After(d)
				proclaim := i%7 == 3
			hold:
				for {
					select {
					case <-end:
						break hold
					case <-ld.Lock().Done():
						break hold
					case <-time.After(time.Millisecond):
						if v := ld.Lock().Validity(); v > 0 {
							until = time.Now().Add(v) // a lower bound of the validity's end
						}
						if proclaim {
							proclaim = false
							_ = ld.Proclaim(ctx, fmt.Sprintf("%s/%d", who, i))
						}
					}
				}
				to := time.Now()
				if until.Before(to) {
					to = until // validity ran out while it led: its claim ends there
				}
				_ = ld.Resign(context.Background())
				chk.record(holding{worker: who, started: began, from: from, to: to, fence: ld.Term()})
				done.Add(1)
			}
		})
	}

	// Faults: every 300 ms, one of: a candidate cut off for 0.2–1.2 s,
	// two nodes paused for up to 150 ms, one node killed and restarted
	// from its AOF 200 ms later.
	var faults atomic.Int64
	faultDone := make(chan struct{})
	go func() {
		defer close(faultDone)
		faults.Store(int64(every(300*time.Millisecond, stop, func() { anyFault(t, nodes, cut[rand.IntN(len(cut))]) })))
	}()
	wg.Wait()
	close(stop)
	<-faultDone
	time.Sleep(100 * time.Millisecond) // the observers read the last leader
	cancel()
	obs.Wait()

	v := chk.violations()
	for i, seen := range observed {
		for j := 1; j < len(seen); j++ {
			if seen[j].Term < seen[j-1].Term {
				v = append(v, fmt.Sprintf("observer %d saw term %d after term %d", i, seen[j].Term, seen[j-1].Term))
			}
			if seen[j] == seen[j-1] {
				v = append(v, fmt.Sprintf("observer %d saw %+v twice", i, seen[j]))
			}
		}
		if len(seen) < 10 {
			v = append(v, fmt.Sprintf("observer %d saw only %d leaders", i, len(seen)))
		}
	}
	t.Logf("%d leaderships, %d faults, observers saw %d and %d leaders, %d violations", done.Load(), faults.Load(), len(observed[0]), len(observed[1]), len(v))
	if len(v) > 0 {
		t.Fatalf("%d violations, the first: %s", len(v), strings.Join(v[:min(5, len(v))], "\n"))
	}
	if done.Load() < int64(target)/2 {
		t.Fatalf("only %d leaderships: too little progress to prove anything", done.Load())
	}
}
