package redlock

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The seeded simulator: each seed builds a run from a random source of its
// own (3, 5 or 7 in-memory nodes running the production scripts, 2 to 4
// Clients standing for processes, workers with random workloads, and
// random faults), runs it in virtual time, and checks the recorded history
// (sim_check_test.go). A failure prints its seed and the command that runs
// that seed alone. The same seed gives the same workload and fault
// schedule; the library's own randomness (tokens, jitter) and goroutine
// interleavings can still differ between runs of one seed.
var (
	simSeeds = flag.Int("sim.seeds", 0, "how many seeds TestSimulation runs (default 100, 20 under -race; make test runs 1000)")
	simFirst = flag.Uint64("sim.first", 1, "the first seed TestSimulation runs")
	simSeed  = flag.Uint64("sim.seed", 0, "run only this seed, with its history (-v)")
)

// TestSimulation runs the simulator's seeds, in as many parallel shards as
// there are processors, and fails on a seed that breaks a checked
// property. By default it runs few seeds (fewer under -race, ten times
// slower); make test runs 1000 without the race detector, make sim 50,000.
func TestSimulation(t *testing.T) {
	first, n := *simFirst, uint64(*simSeeds)
	switch {
	case *simSeed != 0:
		first, n = *simSeed, 1
	case n == 0 && raceEnabled:
		n = 20
	case n == 0:
		n = 100
	}
	start := time.Now()
	shards := uint64(min(runtime.GOMAXPROCS(0), int(n)))
	for shard := range shards {
		t.Run(fmt.Sprint("shard=", shard), func(t *testing.T) {
			t.Parallel()
			for seed := first + shard; seed < first+n; seed += shards {
				var sim *simRun
				began := time.Now()
				synctest.Test(t, func(t *testing.T) { sim = runSim(t, seed, noMutant) })
				if took := time.Since(began); took > 2*time.Second {
					t.Logf("seed %d took %v: %s", seed, took.Round(time.Millisecond), sim.summary())
				}
				if v := sim.violations(); len(v) > 0 {
					t.Fatalf("seed %d: %s\nrun it alone: go test -run TestSimulation -sim.seed=%d -v .\n%s", seed, strings.Join(v, "\n"), seed, sim.around(v))
				}
				if n == 1 {
					t.Logf("seed %d: %s\n%s", seed, sim.summary(), strings.Join(sim.log, "\n"))
				}
			}
		})
	}
	t.Cleanup(func() { t.Logf("%d seeds in %v", n, time.Since(start).Round(time.Millisecond)) })
}

// simRun is one seed's run: its setup, and what happened.
type simRun struct {
	seed    uint64
	mutant  mutant
	ttl     time.Duration
	nodes   []*fakeNode
	latency []time.Duration // per node: how long it takes to answer
	cuts    []*atomic.Bool  // per Client: cut off from every node
	clients []*Client
	begin   time.Time
	end     time.Time // workers start nothing after it

	mu       sync.Mutex
	log      []string
	holdings []simHolding
	faults   int
	forgot   []time.Time // when a node restarted empty: fencing counters forgotten
}

// simHolding is one holder's claim on a key: from Lock returning to the
// earlier of its release and its validity's end (or, under Do, the work's
// context ending).
type simHolding struct {
	keys     []string
	reader   bool // a read-write lock's reader: readers share
	who      string
	token    string
	fence    uint64
	from, to time.Time
}

func (s *simRun) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, fmt.Sprintf("%8.3fs ", time.Since(s.begin).Seconds())+fmt.Sprintf(format, args...))
}

// trace is an observer that logs client c's rounds, with each node's
// answer.
func (s *simRun) trace(c string) Observer {
	return func(e Event) {
		var nodes []string
		for _, n := range e.Nodes {
			r := "ok"
			if n.Err != nil {
				r = n.Err.Error()
			}
			nodes = append(nodes, r)
		}
		s.logf("%s %v %s err=%v validity=%v nodes=%q", c, e.Kind, e.Key, e.Err, e.Validity, nodes)
	}
}

func (s *simRun) record(h simHolding) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holdings = append(s.holdings, h)
	s.log = append(s.log, fmt.Sprintf("%8.3fs %s held %v (fence %d) from %.3fs", time.Since(s.begin).Seconds(), h.who, h.keys, h.fence, h.from.Sub(s.begin).Seconds()))
}

func (s *simRun) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d nodes, %d clients, TTL %v: %d holdings, %d faults", len(s.nodes), len(s.clients), s.ttl, len(s.holdings), s.faults)
}

// around returns the run's log around the first violation's time.
func (s *simRun) around(v []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) <= 60 || *simSeed != 0 {
		return strings.Join(s.log, "\n")
	}
	return strings.Join(s.log[len(s.log)-60:], "\n") + "\n(the last 60 of " + fmt.Sprint(len(s.log)) + " lines; -sim.seed shows all)"
}

// runSim builds and runs one seed, inside the caller's bubble.
func runSim(t *testing.T, seed uint64, m mutant) *simRun {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	s := &simRun{seed: seed, mutant: m, begin: time.Now()}
	s.ttl = time.Duration(200+rng.IntN(1800)) * time.Millisecond
	s.end = s.begin.Add(8 * s.ttl)
	s.nodes = newFakeNodes(3 + 2*rng.IntN(3))
	s.latency = make([]time.Duration, len(s.nodes))
	for i, f := range s.nodes {
		// Every node takes a while to answer, as a real one does: with
		// instant answers a round lasts no time, and a retry paced in
		// rounds (a split vote's) would spin.
		s.latency[i] = time.Duration(50+rng.IntN(950)) * time.Microsecond
		f.delay = s.latency[i]
		m.applyNode(f)
	}
	var wg sync.WaitGroup
	nclients := 2 + rng.IntN(3)
	for i := range nclients {
		cut := &atomic.Bool{}
		nodes := make([]node, len(s.nodes))
		for j, f := range s.nodes {
			nodes[j] = cutNode{f, cut}
		}
		opts := []Option{WithTTL(s.ttl)}
		if *simSeed != 0 { // one seed: its history in full
			opts = append(opts, WithObserver(s.trace(fmt.Sprint("c", i))))
		}
		c, err := newClient(nodes, opts)
		if err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 { // a process whose clock runs ahead proposes larger fencing tokens
			c.proposed.Store(c.propose() + int64(rng.IntN(1e6))*fenceModulus)
		}
		s.cuts = append(s.cuts, cut)
		s.clients = append(s.clients, c)
		for w := range 1 + rng.IntN(3) {
			wrng := rand.New(rand.NewPCG(seed, uint64(100*i+w+1)))
			wg.Go(func() { s.work(c, fmt.Sprintf("c%d.w%d", i, w), wrng) })
		}
	}
	wg.Go(func() { s.injectFaults(rand.New(rand.NewPCG(seed, 0xfa17))) })
	wg.Wait()
	time.Sleep(3 * s.ttl) // every fault has healed
	for _, c := range s.clients {
		_ = c.Close(context.Background())
	}
	return s
}

// injectFaults injects the run's faults, one at a time at random times,
// until the run's end; each heals by itself within about 2 TTLs.
func (s *simRun) injectFaults(rng *rand.Rand) {
	for time.Now().Before(s.end) {
		time.Sleep(time.Duration(int64(s.ttl/4) + rng.Int64N(int64(s.ttl))))
		s.fault(rng)
	}
}

// fault injects one fault and schedules its end.
func (s *simRun) fault(rng *rand.Rand) {
	s.mu.Lock()
	s.faults++
	s.mu.Unlock()
	d := time.Duration(int64(s.ttl/10) + rng.Int64N(int64(2*s.ttl)))
	i := rng.IntN(len(s.nodes))
	f := s.nodes[i]
	switch rng.IntN(7) {
	case 0: // frozen: calls wait, whatever their context says
		gate := make(chan struct{})
		f.setGate(gate)
		s.logf("node %d frozen for %v", i, d)
		time.AfterFunc(d, func() { f.setGate(nil); close(gate) })
	case 1: // killed, and restarted after at least a TTL with nothing kept
		d = max(d, s.ttl+s.ttl/10)
		f.setErr(errFakeDown)
		s.logf("node %d killed for %v, then restarted empty", i, d)
		time.AfterFunc(d, func() {
			f.mem.Restart(false)
			f.setErr(nil)
			s.mu.Lock()
			s.forgot = append(s.forgot, time.Now())
			s.mu.Unlock()
		})
	case 2: // restarted at once, keys kept (persistence)
		f.mem.Restart(true)
		s.logf("node %d restarted, keys kept", i)
	case 3: // slow
		f.mu.Lock()
		f.delay = s.ttl / 20
		f.mu.Unlock()
		s.logf("node %d slow for %v", i, d)
		time.AfterFunc(d, func() { f.mu.Lock(); f.delay = s.latency[i]; f.mu.Unlock() })
	case 4: // a clock off by up to half the drift factor
		rate := 1 + (rng.Float64()-0.5)*defaultDriftFactor
		f.mem.SetClockRate(rate)
		s.logf("node %d clock at %.4f× for %v", i, rate, d)
		time.AfterFunc(d, func() { f.mem.SetClockRate(1) })
	case 6: // restarted at once with nothing kept: safe where every Client knows the node (the restart guard)
		if !s.guarded(i) {
			f.mem.Restart(true)
			s.logf("node %d restarted, keys kept (a Client does not know it yet)", i)
			break
		}
		f.mem.Restart(false)
		s.mu.Lock()
		s.forgot = append(s.forgot, time.Now())
		s.mu.Unlock()
		s.logf("node %d restarted empty, at once", i)
	case 5: // a Client cut off from every node
		c := rng.IntN(len(s.cuts))
		s.cuts[c].Store(true)
		s.logf("client %d cut off for %v", c, d)
		time.AfterFunc(d, func() { s.cuts[c].Store(false) })
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// guarded reports whether every Client's restart guard knows node i, so
// that its restart with nothing kept is seen by all.
func (s *simRun) guarded(i int) bool {
	for _, c := range s.clients {
		c.guard.mu.Lock()
		known := c.guard.ids[i] != ""
		c.guard.mu.Unlock()
		if !known {
			return false
		}
	}
	return true
}
