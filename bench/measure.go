package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redisproc"
)

// env is the set of servers every measure runs on.
type env struct {
	nodes []*redisproc.Server // the lock nodes: node i is the same server for every contender
	base  *redisproc.Server   // the single-node baselines' own server
	via   []string            // when set, lock node i is reached at via[i] (a proxy in front of it)
}

// addrs returns the servers contender c locks on: the baseline server for
// the single-node libraries, the first c.Nodes lock nodes otherwise.
func (e *env) addrs(c contender) []string {
	if c.Lib == "floor" || c.Lib == "redislock" {
		return []string{e.base.Addr}
	}
	a := make([]string, c.Nodes)
	for i := range a {
		a[i] = e.nodes[i].Addr
		if i < len(e.via) {
			a[i] = e.via[i]
		}
	}
	return a
}

func (e *env) build(c contender, failed *atomic.Int64) (instance, error) {
	inst, err := c.build(e.addrs(c), failed)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.Name, err)
	}
	return inst, nil
}

// ---- 1 and 5: uncontended Lock+Unlock cycles ----

// cycleSamples holds one contender's samples from every round.
type cycleSamples struct {
	Times  [][]time.Duration // by round
	Allocs []float64         // heap allocations per cycle, whole process, by round
}

// measureCycles runs every contender for cycles Lock+Unlock cycles on fresh
// keys, one contender after the other, rounds times, in an order of its
// own each round (roundOrder). Blocks
// are short and rounds many, so that every contender sees the machine's
// fast and slow spells alike: on this shared machine a lone loopback round
// trip swings between about 20 and 80 µs from one second to the next.
func measureCycles(ctx context.Context, e *env, cs []contender, rounds, cycles int, tag string) ([]cycleSamples, error) {
	insts, err := warmed(ctx, cs, func(c contender) (instance, error) { return e.build(c, nil) }, 50, tag)
	defer closeAll(insts)
	if err != nil {
		return nil, err
	}
	out := make([]cycleSamples, len(cs))
	keys := make([]string, cycles)
	var before, after runtime.MemStats
	for r := range rounds {
		for _, i := range roundOrder(len(insts), r) {
			in := insts[i]
			for j := range keys {
				keys[j] = fmt.Sprintf("bench:%s:%d:%d:%d", tag, i, r, j)
			}
			times := make([]time.Duration, cycles)
			runtime.GC()
			runtime.ReadMemStats(&before)
			for j, key := range keys {
				start := time.Now()
				if err := in.cycle(ctx, key); err != nil {
					return nil, fmt.Errorf("%s: %w", cs[i].Name, err)
				}
				times[j] = time.Since(start)
			}
			runtime.ReadMemStats(&after)
			out[i].Times = append(out[i].Times, times)
			out[i].Allocs = append(out[i].Allocs, float64(after.Mallocs-before.Mallocs)/float64(cycles))
			if r == 0 || r == rounds-1 {
				if err := e.released(ctx); err != nil {
					return nil, fmt.Errorf("%s: %w", cs[i].Name, err)
				}
			}
		}
	}
	return out, ctx.Err()
}

// roundOrder is the order in which round r runs n contenders: a
// permutation of their indexes, its own for each round (seeded by r, so
// that a run's order can be had again). A contender that always ran
// after the same one would inherit what that one left on the machine
// (idle servers, warm or cold caches), round after round: in the fixed
// order, redlock with the restart guard off read 0.93–1.07× the
// default's cycle p50 in four runs, and 0.96–1.03× in four shuffled
// (docs/performance.md, 2026-12-03 evening).
func roundOrder(n, r int) []int {
	return rand.New(rand.NewPCG(uint64(r), 0x5eed)).Perm(n)
}

// warmed builds an instance of every contender and warms each up with n
// cycles (connections dialled, scripts loaded). The caller closes them
// with closeAll, on error too.
func warmed(ctx context.Context, cs []contender, build func(contender) (instance, error), n int, tag string) ([]instance, error) {
	insts := make([]instance, len(cs))
	for i, c := range cs {
		in, err := build(c)
		if err != nil {
			return insts, err
		}
		insts[i] = in
		for j := range n {
			if err := in.cycle(ctx, fmt.Sprintf("bench:%s:warm:%d:%d", tag, i, j)); err != nil {
				return insts, fmt.Errorf("%s: warm-up: %w", c.Name, err)
			}
		}
	}
	return insts, nil
}

func closeAll(insts []instance) {
	for _, in := range insts {
		if in != nil {
			in.close()
		}
	}
}

// ---- 2: throughput ----

// tputRound is one contender's throughput in one round, with the CPU time
// each cycle cost this process (the client) and the servers.
type tputRound struct {
	PerSec               float64
	ClientCPU, ServerCPU time.Duration // per cycle
}

// measureThroughput runs workers goroutines, each on its own key, through
// one instance per contender (one process serving that many requests at
// once) for d, rounds times interleaved. After each run, it checks that the
// contender left no lock key behind.
func measureThroughput(ctx context.Context, e *env, cs []contender, rounds int, d time.Duration, workers int) ([][]tputRound, error) {
	out := make([][]tputRound, len(cs))
	for r := range rounds {
		for _, i := range roundOrder(len(cs), r) {
			c := cs[i]
			in, err := e.build(c, nil)
			if err != nil {
				return nil, err
			}
			t, err := throughput(ctx, e, in, fmt.Sprintf("bench:tp%d:%d:%d", workers, i, r), d, workers)
			in.close()
			if err == nil {
				err = e.released(ctx)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			out[i] = append(out[i], t)
		}
	}
	return out, nil
}

// released checks that no server holds a lock key: every contender must
// have released what it locked (fence counters, which have no TTL, stay).
// Releases still in flight get a few seconds.
func (e *env) released(ctx context.Context) error {
	var left []string
	for range 30 {
		left = left[:0]
		for _, s := range append(e.nodes, e.base) {
			if !s.Running() {
				continue
			}
			keys, err := lockKeys(ctx, s.Addr)
			if err != nil {
				return err
			}
			left = append(left, keys...)
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%d lock keys left behind, e.g. %q", len(left), left[0])
}

// lockKeys lists the keys with a TTL on the server at addr.
func lockKeys(ctx context.Context, addr string) ([]string, error) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	var out []string
	iter := rc.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		if pttl, err := rc.PTTL(ctx, iter.Val()).Result(); err == nil && pttl > 0 {
			out = append(out, iter.Val())
		}
	}
	return out, iter.Err()
}

// scripts returns how many scripts (EVALSHA and EVAL calls) the first n
// lock nodes have run since they started, from INFO commandstats: what a
// primitive's acquisitions cost the nodes, counted the way a node counts
// them (a look, a release, an extension, a refused attempt: one each).
func (e *env) scripts(ctx context.Context, n int) (int64, error) {
	var total int64
	for _, s := range e.nodes[:n] {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		info, err := rc.Info(ctx, "commandstats").Result()
		rc.Close()
		if err == nil {
			var c int64
			c, err = evalCalls(info)
			total += c
		}
		if err != nil {
			return 0, fmt.Errorf("%s: %w", s.Addr, err)
		}
	}
	return total, nil
}

// evalCalls returns the calls of EVALSHA and EVAL in the text of INFO
// commandstats (lines such as "cmdstat_evalsha:calls=12,usec=…").
func evalCalls(info string) (int64, error) {
	var total int64
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_eval")
		if !ok || !strings.HasPrefix(rest, ":") && !strings.HasPrefix(rest, "sha:") {
			continue
		}
		_, after, _ := strings.Cut(rest, "calls=")
		calls, _, _ := strings.Cut(after, ",")
		c, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("commandstats %q: %w", line, err)
		}
		total += c
	}
	return total, nil
}

// cpu returns the CPU time used so far by this process and by the servers.
func (e *env) cpu() (client, servers time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for _, s := range append(e.nodes, e.base) {
		if t, err := s.CPUTime(); err == nil {
			servers += t
		}
	}
	return client, servers
}

func throughput(ctx context.Context, e *env, in instance, prefix string, d time.Duration, workers int) (tputRound, error) {
	var (
		done     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	// Warm-up: every worker's connection dialled before the clock starts.
	for g := range workers {
		wg.Go(func() {
			if err := in.cycle(ctx, fmt.Sprintf("%s:%d", prefix, g)); err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return tputRound{}, firstErr
	}
	c0, s0 := e.cpu()
	start := time.Now()
	deadline := start.Add(d)
	for g := range workers {
		key := fmt.Sprintf("%s:%d", prefix, g)
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				if err := in.cycle(ctx, key); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	c1, s1 := e.cpu()
	n := max(done.Load(), 1)
	return tputRound{PerSec: float64(done.Load()) / elapsed.Seconds(),
		ClientCPU: (c1 - c0) / time.Duration(n), ServerCPU: (s1 - s0) / time.Duration(n)}, firstErr
}

// ---- 4: one node of five frozen or dead ----

// faultResult is one contender's figures under one fault.
type faultResult struct {
	Cycles               int
	LockP50, LockP99     time.Duration
	UnlockP50, UnlockP99 time.Duration
	Errors               int // Lock or Unlock calls that failed
}

// Faults the measure applies to the last of the contender's nodes.
const (
	faultPause = "SIGSTOP"
	faultKill  = "SIGKILL"
)

// measureFault builds the contender, warms it up, applies the fault to its
// last node, then runs Lock and Unlock on fresh keys until maxCycles or
// budget is spent, and restores the node (SIGCONT, or a restart on the same
// port) before returning.
func measureFault(ctx context.Context, e *env, c contender, fault string, maxCycles int, budget time.Duration) (res faultResult, err error) {
	in, err := e.build(c, nil)
	if err != nil {
		return res, err
	}
	defer in.close()
	for j := range 20 {
		if err := in.cycle(ctx, fmt.Sprintf("bench:fault:warm:%d:%d", time.Now().UnixNano(), j)); err != nil {
			return res, fmt.Errorf("%s: warm-up: %w", c.Name, err)
		}
	}
	node := e.nodes[c.Nodes-1]
	switch fault {
	case faultPause:
		if err := node.Pause(); err != nil {
			return res, err
		}
		defer node.Resume()
	case faultKill:
		node.Stop()
		defer func() {
			if rerr := node.Restart(); rerr != nil && err == nil {
				err = fmt.Errorf("restart %s after the fault: %w", node.Addr, rerr)
			}
		}()
	default:
		return res, fmt.Errorf("unknown fault %q", fault)
	}
	var locks, unlocks []time.Duration
	start := time.Now()
	for i := 0; i < maxCycles && time.Since(start) < budget && ctx.Err() == nil; i++ {
		key := fmt.Sprintf("bench:fault:%s:%d:%d", fault, start.UnixNano(), i)
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		t0 := time.Now()
		unlock, err := in.lock(lctx, key)
		cancel()
		if err != nil {
			res.Errors++
			continue
		}
		locks = append(locks, time.Since(t0))
		t0 = time.Now()
		if err := unlock(ctx); err != nil && !errors.Is(err, context.Canceled) {
			res.Errors++
		}
		unlocks = append(unlocks, time.Since(t0))
	}
	res.Cycles = len(locks)
	if len(locks) > 0 {
		l, u := sorted(locks), sorted(unlocks)
		res.LockP50, res.LockP99 = pct(l, 0.50), pct(l, 0.99)
		res.UnlockP50, res.UnlockP99 = pct(u, 0.50), pct(u, 0.99)
	}
	return res, ctx.Err()
}
