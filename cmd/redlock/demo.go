package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// exitViolation is demo's status when its checker saw two holders at once
// or a fencing token that went backwards.
const exitViolation = 1

type demoConfig struct {
	duration    time.Duration
	nodes       int
	workers     int
	hold        time.Duration
	embedded    bool
	redisServer bool
	plain       bool
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	const name = "demo"
	fs := newFlags(name, "[flags]", stderr)
	var c demoConfig
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "how long the demo runs (at least 3s)")
	fs.IntVar(&c.nodes, "node-count", 5, "how many nodes to start (3 to 9)")
	fs.IntVar(&c.workers, "workers", 4, "how many workers contend for the lock, each with its own Client")
	fs.DurationVar(&c.hold, "hold", 10*time.Millisecond, "how long a worker holds the lock each time")
	fs.BoolVar(&c.embedded, "embedded", false, "use embedded nodes (miniredis, in this process) even if redis-server is installed")
	fs.BoolVar(&c.redisServer, "redis-server", false, "use redis-server processes (the default when redis-server is on PATH)")
	fs.BoolVar(&c.plain, "plain", false, "print a line per second instead of a live view (the default when output is not a terminal)")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	switch {
	case fs.NArg() > 0:
		return usageError(stderr, name, "unexpected argument %q", fs.Arg(0))
	case c.duration < 3*time.Second:
		return usageError(stderr, name, "--duration %v is too short: at least 3s", c.duration)
	case c.nodes < 3 || c.nodes > 9:
		return usageError(stderr, name, "--node-count %d: want 3 to 9", c.nodes)
	case c.workers < 1 || c.workers > 64:
		return usageError(stderr, name, "--workers %d: want 1 to 64", c.workers)
	case c.hold <= 0:
		return usageError(stderr, name, "--hold %v: want a positive duration", c.hold)
	case c.embedded && c.redisServer:
		return usageError(stderr, name, "--embedded and --redis-server exclude each other")
	}
	if !c.plain {
		f, ok := stdout.(*os.File)
		c.plain = !ok || !isTerminal(f)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{cfg: c, out: stdout}
	if err := d.run(ctx); err != nil {
		fmt.Fprintf(stderr, "redlock demo: %v\n", err)
		return exitFailure
	}
	if d.violations.Load() > 0 {
		return exitViolation
	}
	return 0
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// demo is one run: its nodes, workers, checker and view.
type demo struct {
	cfg   demoConfig
	out   io.Writer
	ttl   time.Duration
	kind  string // what the nodes are, as shown
	nodes []demoNode
	up    []atomic.Bool

	// The checker: a holder enters and leaves; two inside at once, or a
	// fencing token not above the last one written, is a violation.
	inside     atomic.Int32
	lastFence  atomic.Uint64
	violations atomic.Int64
	heldInTick atomic.Bool

	acquired, handoffs, refusals atomic.Int64
	holder                       atomic.Int32 // worker number + 1; 0 none
	fence                        atomic.Uint64
	lastWorker                   atomic.Int32
	unavailable                  time.Duration

	mu     sync.Mutex
	events []string
}

func (d *demo) event(start time.Time, format string, args ...any) {
	line := fmt.Sprintf("%5.1fs  %s", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	d.mu.Lock()
	d.events = append(d.events, line)
	d.mu.Unlock()
	if d.cfg.plain {
		fmt.Fprintln(d.out, line)
	}
}

func (d *demo) run(ctx context.Context) error {
	d.ttl = min(max(d.cfg.duration/15, 200*time.Millisecond), 2*time.Second).Round(10 * time.Millisecond)
	defer func() {
		for _, n := range d.nodes {
			n.close()
		}
	}()
	if err := d.startNodes(); err != nil {
		return err
	}
	_, isEmbedded := d.nodes[0].(embedded)
	opts := []redlock.Option{redlock.WithTTL(d.ttl), redlock.WithFencing(), redlock.WithAnyNodeCount(),
		redlock.WithNodeTimeout(d.ttl / 10), redlock.WithObserver(countRefusals(&d.refusals))}
	if isEmbedded {
		// miniredis has no INFO server, so no run_id: the restart guard
		// needs one. Nodes come back with their data here, which keeps the
		// lock safe without it.
		opts = append(opts, redlock.WithRestartGuard(0))
	}

	runCtx, cancel := context.WithTimeout(ctx, d.cfg.duration)
	defer cancel()
	start := time.Now()
	fmt.Fprintf(d.out, "redlock demo: %d %s; %d workers, TTL %v, fencing on. Ctrl-C ends it early.\n",
		len(d.nodes), d.kind, d.cfg.workers, d.ttl)

	var wg sync.WaitGroup
	defer wg.Wait()
	if isEmbedded {
		wg.Go(func() { d.clock(runCtx) })
	}
	var clients []redis.UniversalClient
	defer func() { closeAll(clients) }()
	for w := range d.cfg.workers {
		cs := make([]redis.UniversalClient, len(d.nodes))
		for i, n := range d.nodes {
			cs[i] = redis.NewClient(&redis.Options{Addr: n.addr(), DialerRetries: 1, ContextTimeoutEnabled: true,
				DialTimeout: 200 * time.Millisecond})
		}
		clients = append(clients, cs...)
		c, err := redlock.New(cs, opts...)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		wg.Go(func() { d.worker(runCtx, c, w) })
	}
	wg.Go(func() { d.script(runCtx, start) })
	d.watch(runCtx, start)
	cancel()
	wg.Wait()
	d.summary(time.Since(start))
	return nil
}

// clock moves the embedded nodes' time on with real time (see embedded).
func (d *demo) clock(ctx context.Context) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			for _, n := range d.nodes {
				n.(embedded).m.FastForward(now.Sub(last))
			}
			last = now
		}
	}
}

// script kills a minority of the nodes, then one more (no majority is
// left), then restores them all, at fixed points of the run. Nodes come
// back well after the TTL: those that lost keys would then have nothing to
// forget.
func (d *demo) script(ctx context.Context, start time.Time) {
	n, dur := len(d.nodes), d.cfg.duration
	minority := (n - 1) / 2
	steps := []struct {
		at time.Duration
		do func()
	}{
		{dur / 4, func() {
			d.killNodes(0, minority)
			d.event(start, "killed %s: %d of %d left, still a majority", nodeList(0, minority), n-minority, n)
		}},
		{dur * 9 / 20, func() {
			d.killNodes(minority, minority+1)
			d.event(start, "killed %s: %d of %d left, no majority: the lock is refused", nodeList(minority, minority+1), n-minority-1, n)
		}},
		{dur * 13 / 20, func() {
			var errs []error
			for i := range minority + 1 {
				if err := d.nodes[i].restore(); err != nil {
					errs = append(errs, err)
				} else {
					d.up[i].Store(true)
				}
			}
			if err := errors.Join(errs...); err != nil {
				d.event(start, "restoring nodes failed: %v", err)
				return
			}
			d.event(start, "restored %s with their data: all %d up", nodeList(0, minority+1), n)
		}},
	}
	for _, s := range steps {
		sleepCtx(ctx, time.Until(start.Add(s.at)))
		if ctx.Err() != nil {
			return
		}
		s.do()
	}
}

// worker takes the lock again and again, and while holding it writes its
// fencing token to the checker's store.
func (d *demo) worker(ctx context.Context, c *redlock.Client, w int) {
	for ctx.Err() == nil {
		l, err := c.Lock(ctx, "demo", redlock.WithMetadata(fmt.Sprintf("worker %d", w+1)))
		if err != nil {
			continue // ctx ended, or gave up for now: Lock retries with backoff inside
		}
		d.enter(w, l.Fence())
		sleepCtx(ctx, d.cfg.hold)
		if l.Validity() <= 0 {
			d.violations.Add(1) // held past its validity: the hold is far inside the TTL, so never
		}
		d.leave()
		_ = l.Unlock(context.WithoutCancel(ctx))
	}
}

func (d *demo) enter(w int, fence uint64) {
	if d.inside.Add(1) != 1 {
		d.violations.Add(1)
	}
	if prev := d.lastFence.Swap(fence); fence <= prev {
		d.violations.Add(1)
	}
	d.heldInTick.Store(true)
	d.acquired.Add(1)
	if last := d.lastWorker.Swap(int32(w + 1)); last != 0 && last != int32(w+1) {
		d.handoffs.Add(1)
	}
	d.holder.Store(int32(w + 1))
	d.fence.Store(fence)
}

func (d *demo) leave() {
	d.holder.Store(0)
	d.inside.Add(-1)
}

// watch refreshes the view until ctx ends, and adds up the time nobody held
// the lock (in ticks of 50 ms without any holder: a hand-off takes about a
// millisecond, so such a tick means the lock could not be had).
func (d *demo) watch(ctx context.Context, start time.Time) {
	const tick = 50 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	var lastDraw time.Time
	var lastAcq, lastRef int64
	var rate, refRate float64
	lines := 0
	for {
		select {
		case <-ctx.Done():
			if !d.cfg.plain {
				d.draw(start, rate, refRate, lines)
			}
			return
		case now := <-t.C:
			if !d.heldInTick.Swap(false) && d.inside.Load() == 0 {
				d.unavailable += tick
			}
			if now.Sub(lastDraw) < time.Second && (d.cfg.plain || now.Sub(lastDraw) < 250*time.Millisecond) {
				continue
			}
			acq, ref := d.acquired.Load(), d.refusals.Load()
			if !lastDraw.IsZero() {
				secs := now.Sub(lastDraw).Seconds()
				rate, refRate = float64(acq-lastAcq)/secs, float64(ref-lastRef)/secs
			}
			lastDraw, lastAcq, lastRef = now, acq, ref
			if d.cfg.plain {
				fmt.Fprintf(d.out, "%5.1fs  nodes up %d/%d  holder %-9s  fence %-6d  %5.0f acquisitions/s  %5.0f refusals/s\n",
					now.Sub(start).Seconds(), d.upCount(), len(d.nodes), d.holderName(), d.fence.Load(), rate, refRate)
			} else {
				lines = d.draw(start, rate, refRate, lines)
			}
		}
	}
}

// quietLogger drops go-redis's log lines about the nodes the demo kills on
// purpose.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
