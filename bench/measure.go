package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
// keys, one contender after the other, rounds times (A B C A B C …). Blocks
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
		for i, in := range insts {
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
		for i, c := range cs {
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

// ---- 3: contention and hand-off ----

// contended is one contender in the contention measure: Workers
// goroutines (4 when 0). Shared: they share one instance (one process);
// otherwise each has its own (one process each).
type contended struct {
	contender
	Shared  bool
	Workers int
}

func (c contended) workers() int {
	if c.Workers == 0 {
		return 4
	}
	return c.Workers
}

// queuedKey is the context key under which contend leaves a *time.Time
// for the instance to fill with the Lock call's ticket, when its library
// has one (redlock's Event.Queued); otherwise the Lock call's start stands
// in for it.
type queuedKey struct{}

// handoffRound is one contender's figures from one round.
type handoffRound struct {
	PerSec   float64       // acquisitions per second
	ToOther  float64       // share of acquisitions that went to another goroutine than the last holder
	GapP50   time.Duration // start of Unlock to the next holder's Lock returning
	GapP99   time.Duration
	OtherP99 time.Duration // the gap's p99 counting only acquisitions by another goroutine
	LockP99  time.Duration // Lock call to return, waiting included
	Attempts float64       // tries per acquisition
	InOrder  float64       // share of acquisitions that no earlier ticket (or arrival) was served after
	Errors   int           // Lock calls that gave up (retries exhausted)
}

// measureContention has each contender's goroutines contend for one key,
// each holding it 1 ms and going straight back for it, for d per
// contender, rounds times interleaved.
func measureContention(ctx context.Context, e *env, cs []contended, rounds int, d time.Duration) ([][]handoffRound, error) {
	out := make([][]handoffRound, len(cs))
	for r := range rounds {
		for i, c := range cs {
			h, err := contend(ctx, e, c, fmt.Sprintf("bench:handoff:%d:%d:%d", i, r, time.Now().UnixNano()), d)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			out[i] = append(out[i], h)
		}
	}
	return out, nil
}

func contend(ctx context.Context, e *env, c contended, key string, d time.Duration) (handoffRound, error) {
	workers := c.workers()
	var failed atomic.Int64
	var owned []instance // closed at the end
	defer func() {
		for _, in := range owned {
			in.close()
		}
	}()
	insts := make([]instance, workers) // one per goroutine
	for g := range insts {
		if c.Shared && g > 0 {
			insts[g] = insts[0]
			continue
		}
		in, err := e.build(c.contender, &failed)
		if err != nil {
			return handoffRound{}, err
		}
		insts[g] = in
		owned = append(owned, in)
		// Warm it up (connections, scripts) on a key of its own, as a
		// running service would be: the measure is of steady contention.
		if err := in.cycle(ctx, fmt.Sprintf("%s:warm:%d", key, g)); err != nil {
			return handoffRound{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	var (
		mu          sync.Mutex
		lastHolder  = -1
		unlockStart time.Time
		gaps, locks []time.Duration
		otherGaps   []time.Duration
		tickets     []time.Time // of each acquisition, in the order served
		toOther     int
		giveUps     int
		firstErr    error
		wg          sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(d)
	for g := range workers {
		in := insts[g]
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				ticket := new(time.Time)
				lctx = context.WithValue(lctx, queuedKey{}, ticket)
				unlock, err := in.lock(lctx, key)
				cancel()
				now := time.Now()
				if err != nil {
					mu.Lock()
					giveUps++
					if giveUps > 1000 && firstErr == nil {
						firstErr = fmt.Errorf("1000 Lock calls gave up, the last with: %w", err)
					}
					stop := firstErr != nil || now.After(deadline)
					mu.Unlock()
					if stop {
						return
					}
					continue
				}
				mu.Lock()
				if now.After(deadline) || firstErr != nil {
					mu.Unlock()
					_ = unlock(context.Background())
					return
				}
				locks = append(locks, now.Sub(t0))
				if ticket.IsZero() {
					*ticket = t0
				}
				tickets = append(tickets, *ticket)
				if lastHolder >= 0 {
					gaps = append(gaps, now.Sub(unlockStart))
					if g != lastHolder {
						toOther++
						otherGaps = append(otherGaps, now.Sub(unlockStart))
					}
				}
				lastHolder = g
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				unlockStart = time.Now()
				mu.Unlock()
				if err := unlock(context.Background()); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("unlock: %w", err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return handoffRound{}, firstErr
	}
	h := handoffRound{PerSec: float64(len(locks)) / d.Seconds(), Errors: giveUps}
	if len(gaps) > 0 {
		g := sorted(gaps)
		h.GapP50, h.GapP99 = pct(g, 0.50), pct(g, 0.99)
		h.ToOther = float64(toOther) / float64(len(gaps))
		h.OtherP99 = pct(sorted(otherGaps), 0.99)
	}
	if len(locks) > 0 {
		h.LockP99 = pct(sorted(locks), 0.99)
		h.Attempts = float64(int64(len(locks))+failed.Load()) / float64(len(locks))
		h.InOrder = inOrder(tickets)
	}
	return h, ctx.Err()
}

// inOrder returns the share of acquisitions, given their tickets in the
// order they were served, that were served before every later-ticketed
// one: acquisition i is out of order when some acquisition served after it
// had an earlier ticket (it waited, and i overtook it).
func inOrder(tickets []time.Time) float64 {
	if len(tickets) == 0 {
		return 0
	}
	ok := 0
	var least time.Time // the earliest ticket served after i
	for i := len(tickets) - 1; i >= 0; i-- {
		if least.IsZero() || !tickets[i].After(least) {
			ok++
		}
		if least.IsZero() || tickets[i].Before(least) {
			least = tickets[i]
		}
	}
	return float64(ok) / float64(len(tickets))
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
