package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// validUntil is when l's validity ends, on this process's monotonic clock
// (a few nanoseconds early at most: the two clock readings are apart).
func validUntil(l *redlock.Lock) time.Time { return time.Now().Add(l.Validity()) }

func pauseOf(sc scenario, worker, i int) time.Duration {
	if sc.pause == nil {
		return 0
	}
	return sc.pause(worker, i)
}

// pauseMinority pauses two nodes chosen at random for up to 150 ms.
func pauseMinority(t *testing.T, nodes []*Node) string {
	victims := rand.Perm(len(nodes))[:2]
	for _, i := range victims {
		nodes[i].Pause(t)
	}
	d := time.Duration(rand.IntN(150)) * time.Millisecond
	time.Sleep(d)
	for _, i := range victims {
		nodes[i].Resume(t)
	}
	return fmt.Sprintf("%s and %s paused for %v", nodes[victims[0]].Addr, nodes[victims[1]].Addr, d)
}

// anyFault injects one fault chosen at random: a Client cut off (through
// proxies, its own) for 0.2–1.2 s, a minority of nodes paused, or a node
// killed and restarted 200 ms later (from its AOF, for persistent nodes).
// It returns what it did, for a journal.
func anyFault(t *testing.T, nodes []*Node, proxies []*Proxy) string {
	switch rand.IntN(3) {
	case 0:
		d := time.Duration(200+rand.IntN(1000)) * time.Millisecond
		cutOff(t, proxies, d)
		return fmt.Sprintf("the proxied Client cut off for %v", d)
	case 1:
		return pauseMinority(t, nodes)
	default:
		victim := nodes[rand.IntN(len(nodes))]
		victim.Kill(t)
		time.Sleep(200 * time.Millisecond)
		victim.Restart(t)
		return victim.Addr + " killed, restarted 200 ms later"
	}
}

// cutOff cuts every link through proxies for d.
func cutOff(t *testing.T, proxies []*Proxy, d time.Duration) {
	for _, p := range proxies {
		p.Partition(t)
	}
	time.Sleep(d)
	for _, p := range proxies {
		p.Heal(t)
	}
}

// every runs f every period until stop, and counts the runs.
func every(period time.Duration, stop <-chan struct{}, f func()) int {
	n := 0
	for {
		select {
		case <-stop:
			return n
		case <-time.After(period):
			f()
			n++
		}
	}
}

// faultsEvery injects a fault from fault every period until the returned
// stop is called, which waits for the fault under way and returns how many
// were injected.
func faultsEvery(period time.Duration, fault func()) (stop func() int) {
	quit := make(chan struct{})
	n := make(chan int)
	go func() { n <- every(period, quit, fault) }()
	return func() int {
		close(quit)
		return <-n
	}
}

// holdRepeatedly is a chaos worker: until done reaches target or deadline
// passes, it takes a lock with acquire (within 2 s), holds it 0–20 ms,
// releases it, hands record the lock and its holding (from Lock returning
// to the earlier of Unlock and the end of its validity), and rests for up
// to rest before the next.
func holdRepeatedly(done *atomic.Int64, target int, deadline time.Time, who string, rest time.Duration, acquire func(context.Context) (*redlock.Lock, error), record func(*redlock.Lock, holding)) {
	for done.Load() < int64(target) && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(withWorker(context.Background(), who), 2*time.Second)
		began := time.Now()
		l, err := acquire(ctx)
		cancel()
		if err != nil {
			continue
		}
		from := time.Now()
		until := validUntil(l)
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		to := time.Now()
		if until.Before(to) {
			to = until
		}
		_ = l.Unlock(withWorker(context.Background(), who))
		record(l, holding{worker: who, started: began, from: from, to: to, fence: l.Fence()})
		done.Add(1)
		if rest > 0 {
			time.Sleep(rand.N(rest))
		}
	}
}

// readNodesEvery reads every node every period, through an admin client of
// its own with 50 ms timeouts, until the returned stop is called: read
// returns the violations one node's state shows, and ok false when the
// node did not answer (paused or killed). stop returns how many reads
// were answered and every violation found.
func readNodesEvery(nodes []*Node, period time.Duration, read func(ctx context.Context, admin *redis.Client, node *Node) (violations []string, ok bool)) (stop func() (int, []string)) {
	quit, done := make(chan struct{}), make(chan struct{})
	var reads int
	var found []string
	go func() {
		defer close(done)
		admins := make([]*redis.Client, len(nodes))
		for i, n := range nodes {
			admins[i] = redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1, ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
			defer admins[i].Close()
		}
		for {
			select {
			case <-quit:
				return
			case <-time.After(period):
			}
			for i, a := range admins {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				v, ok := read(ctx, a, nodes[i])
				cancel()
				if ok {
					reads++
					found = append(found, v...)
				}
			}
		}
	}()
	return func() (int, []string) {
		close(quit)
		<-done
		return reads, found
	}
}

// fencedAndGranted runs a chaos run twice: fenced, and with the default
// options, when some acquisitions must be held by a place's ID (the run
// tests the grant by release). Fenced, a set's waiters attempt, never
// granted (none may be held by a place's ID); a writer behind a fenced
// writer, and a permit's waiter behind a fenced permit (since
// 2026-12-04), is granted by its release, with the fencing token it
// proposed (fencedGrants: some must be). run returns how many of
// its acquisitions (what) were held by a place's ID.
func fencedAndGranted(t *testing.T, what string, fencedGrants bool, run func(*testing.T, ...redlock.Option) int64) {
	t.Run("fenced", func(t *testing.T) {
		granted := run(t, redlock.WithFencing())
		switch {
		case fencedGrants && granted == 0:
			t.Fatalf("no fenced %s granted by a release: the run did not test the fenced grant", what)
		case !fencedGrants && granted != 0:
			t.Fatalf("%d fenced %s held by a place's ID", granted, what)
		}
	})
	t.Run("granted by releases", func(t *testing.T) {
		if run(t) == 0 {
			t.Fatalf("no %s granted by a release: the run did not test the grant", what)
		}
	})
}
