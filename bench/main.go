// Command bench compares redlock with the floor (one node, SET NX + EVALSHA
// compare-and-delete), bsm/redislock and go-redsync/redsync on local
// redis-server processes it starts and stops itself, and publishes the
// results with charts into docs/performance.md.
//
//	make bench                      # from the repository root
//	cd bench && go run .            # the same
//	cd bench && go run . -quick     # a 1-minute smoke run that writes nothing
//
// It starts 7 lock nodes (3 and 5 for the comparisons, 7 for scaling) plus
// one server for the single-node baselines, on free loopback ports, and
// kills them on every exit path (including Ctrl-C; and the kernel kills them
// if this process dies). It is its own Go module, so that the libraries it
// compares never enter the library's go.mod.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redisproc"
)

type config struct {
	rounds, cycles       int
	tputRounds           int
	tput                 time.Duration
	contRounds           int
	cont                 time.Duration
	killReps             int
	resigns, kills       int
	faultCycles          int
	faultBudget          time.Duration
	wanRounds, wanCycles int
	doc, charts          string
	write                bool
	only                 string
	match                string
	cpuprofile           string
}

// keep filters contenders by -match, keeping the references.
func (c config) keep(cs []contender) []contender {
	return slices.DeleteFunc(cs, func(x contender) bool {
		return c.match != "" && x.Lib != "floor" && x.Lib != "redislock" && !strings.Contains(x.Name, c.match)
	})
}

// runs reports whether measure name is to be run.
func (c config) runs(name string) bool {
	return c.only == "" || slices.Contains(strings.Split(c.only, ","), name)
}

func main() {
	if spec := os.Getenv(waiterEnv); spec != "" {
		os.Exit(waiterChild(spec)) // a waiting process of the kill measure
	}
	if spec := os.Getenv(candidateEnv); spec != "" {
		os.Exit(candidateChild(spec)) // a candidate of the failover measure
	}
	var c config
	quick := flag.Bool("quick", false, "a short smoke run (about a minute) that publishes nothing")
	flag.IntVar(&c.rounds, "rounds", 40, "interleaved rounds of the uncontended and scaling measures")
	flag.IntVar(&c.cycles, "cycles", 25, "Lock+Unlock cycles per contender per round")
	flag.IntVar(&c.tputRounds, "throughput-rounds", 3, "interleaved rounds of the throughput measure")
	flag.DurationVar(&c.tput, "throughput", 2*time.Second, "throughput run per contender per round")
	flag.IntVar(&c.contRounds, "contention-rounds", 3, "interleaved rounds of the contention measure")
	flag.DurationVar(&c.cont, "contention", 3*time.Second, "contention run per contender per round")
	flag.DurationVar(&contentionHold, "contention-hold", time.Millisecond, "how long each holder holds the key in the contention measure (0: no work)")
	flag.IntVar(&c.killReps, "kill-reps", 8, "waiting processes SIGKILLed at the head of the queue")
	flag.IntVar(&c.resigns, "failover-resigns", 500, "leader resignations per failover condition (500: a p99 of 100 is its second-largest sample)")
	flag.IntVar(&c.kills, "failover-kills", 10, "leader processes SIGKILLed per failover condition")
	flag.IntVar(&c.faultCycles, "fault-cycles", 100, "at most this many cycles per contender per fault")
	flag.DurationVar(&c.faultBudget, "fault-budget", 8*time.Second, "and no new cycle after this long")
	flag.IntVar(&c.wanRounds, "wan-rounds", 4, "interleaved rounds of the WAN measure")
	flag.IntVar(&c.wanCycles, "wan-cycles", 50, "Lock+Unlock cycles per contender per WAN round")
	flag.StringVar(&c.doc, "doc", "../docs/performance.md", "document whose generated section is replaced")
	flag.StringVar(&c.charts, "charts", "../docs/bench", "directory for the SVG charts and results.json")
	flag.BoolVar(&c.write, "write", true, "publish into -doc and -charts")
	flag.StringVar(&c.only, "only", "", "run only these measures (comma separated: cycle,throughput,contention,faults,scaling,wan,failover,fairness); publishes nothing")
	flag.StringVar(&c.match, "match", "", "run only contenders whose name contains this (the floor and bsm/redislock, the references, always run)")
	flag.StringVar(&c.cpuprofile, "cpuprofile", "", "write this process's CPU profile to the file")
	flag.Parse()
	if *quick {
		c = config{rounds: 5, cycles: 20, tputRounds: 1, tput: 300 * time.Millisecond, contRounds: 1,
			cont: 500 * time.Millisecond, killReps: 2, resigns: 10, kills: 2, faultCycles: 5, faultBudget: 2 * time.Second, wanRounds: 1, wanCycles: 5,
			only: c.only, match: c.match, cpuprofile: c.cpuprofile}
	}
	if c.only != "" || c.match != "" {
		c.write = false
	}
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// quiet drops go-redis's log lines about the nodes killed on purpose.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func run(c config) error {
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := time.Now()
	if c.cpuprofile != "" {
		f, err := os.Create(c.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	e := &env{}
	defer e.close()
	if err := e.start(); err != nil {
		return err
	}
	res := &results{Date: began.UTC().Format("2006-01-02"), Go: runtime.Version(), CPUs: runtime.NumCPU(),
		Command: "make bench", Libraries: libraries(), Rounds: c.rounds, Cycles: c.cycles,
		Throughput: c.tput, Contention: c.cont, ContentionHold: contentionHold}
	res.Redis = redisVersion(ctx, e.base.Addr)
	for _, measure := range []func(context.Context, *env, *results) error{
		c.cycle, c.throughput, c.contention, c.faults, c.scaling, c.wan, c.failover, c.fairness,
	} {
		if err := measure(ctx, e, res); err != nil {
			return err
		}
	}
	res.Elapsed = time.Since(began)

	fmt.Println(res.markdown("../docs/bench"))
	if !c.write {
		return nil
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := res.publish(c.doc, c.charts, append(js, '\n')); err != nil {
		return err
	}
	logf("wrote %s and the charts in %s (%s in all)", c.doc, c.charts, res.Elapsed.Round(time.Second))
	return nil
}

// start starts the 7 lock nodes and the baseline's server; close stops
// them, whichever started.
func (e *env) start() error {
	for range 7 {
		s, err := redisproc.Start(redisproc.Config{})
		if err != nil {
			return err
		}
		e.nodes = append(e.nodes, s)
	}
	base, err := redisproc.Start(redisproc.Config{})
	if err != nil {
		return err
	}
	e.base = base
	logf("started 8 redis-server processes (7 lock nodes, 1 baseline) on 127.0.0.1")
	return nil
}

func (e *env) close() {
	for _, s := range append(e.nodes, e.base) {
		if s != nil {
			s.Close()
		}
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// libraries returns the versions of the modules compared, from the build.
func libraries() map[string]string {
	out := map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			out[d.Path] = d.Version
		}
	}
	return out
}

func redisVersion(ctx context.Context, addr string) string {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	info, err := rc.Info(ctx, "server").Result()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "unknown"
}
