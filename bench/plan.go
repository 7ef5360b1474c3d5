package main

import (
	"context"
	"fmt"

	"github.com/redlock-go/redlock"
)

// The measures, in the order run runs them: each runs only if -only asks
// for it (or -only is empty), and fills its part of the results.

// uncontended are the contenders of the cycle and throughput measures.
func (c config) uncontended() []contender {
	return c.keep([]contender{
		floorContender(), redislockContender(),
		redsyncContender(3, false), redsyncContender(5, false), redsyncContender(5, true),
		bareContender(5),
		redlockContender(3, ""), redlockContender(5, ""),
		redlockContender(5, "fencing", redlock.WithFencing()),
		redlockContender(5, "restart guard off", redlock.WithRestartGuard(0)),
	})
}

func (c config) cycle(ctx context.Context, e *env, res *results) error {
	if !c.runs("cycle") {
		return nil
	}
	uncontended := c.uncontended()
	logf("1/8 uncontended cycles: %d contenders × %d rounds × %d cycles", len(uncontended), c.rounds, c.cycles)
	cyc, err := measureCycles(ctx, e, uncontended, c.rounds, c.cycles, "cycle")
	if err != nil {
		return err
	}
	res.Cycle = summarizeCycles(uncontended, cyc)
	return nil
}

func (c config) throughput(ctx context.Context, e *env, res *results) error {
	if !c.runs("throughput") {
		return nil
	}
	uncontended := c.uncontended()
	logf("2/8 throughput: %d contenders × %d rounds × %s, 32 goroutines", len(uncontended), c.tputRounds, c.tput)
	tp, err := measureThroughput(ctx, e, uncontended, c.tputRounds, c.tput, 32)
	if err != nil {
		return err
	}
	res.Tput = summarizeThroughput(uncontended, tp, 1)
	many := c.keep([]contender{
		floorContender(), redislockContender(), redsyncContender(5, false), bareContender(5),
		redlockContender(5, ""), redlockContender(5, "fencing", redlock.WithFencing()),
	})
	logf("2/8 throughput: %d contenders × %d rounds × %s, 256 goroutines", len(many), c.tputRounds, c.tput)
	tp, err = measureThroughput(ctx, e, many, c.tputRounds, c.tput, 256)
	if err != nil {
		return err
	}
	res.Tput256 = summarizeThroughput(many, tp, 1)
	return nil
}

func (c config) contention(ctx context.Context, e *env, res *results) error {
	if !c.runs("contention") {
		return nil
	}
	contention := []contended{
		{contender: redislockContender()},
		{contender: redsyncContender(3, false)}, {contender: redsyncContender(3, true)},
		{contender: redsyncContender(5, false)}, {contender: redsyncContender(5, true)},
		{contender: redlockContender(3, "")}, {contender: redlockContender(5, "")},
		{contender: redlockContender(5, "fencing", redlock.WithFencing())},
		// Auto-extended, as Do's and an election's locks are: a let-in used
		// to be extended before Lock returned it (two rounds a hand-off).
		{contender: redlockContender(5, "auto-extended (as Do)", redlock.WithAutoExtend(0))},
		// With metadata, as the demo's workers lock: a waiter with metadata
		// used to be woken to attempt (two rounds a hand-off).
		{contender: redlockContender(5, "with metadata", redlock.WithMetadata("host=bench-worker pid=4242"))},
		{contender: redlockContender(5, ""), Shared: true},
		{contender: redislockContender(), Workers: 16},
		{contender: redsyncContender(5, true), Workers: 16},
		{contender: redlockContender(5, ""), Workers: 16},
		{contender: redlockContender(5, ""), Workers: 16, Shared: true},
	}
	logf("3/8 contention: %d contenders × %d rounds × %s", len(contention), c.contRounds, c.cont)
	ho, err := measureContention(ctx, e, contention, c.contRounds, c.cont)
	if err != nil {
		return err
	}
	res.Handoff = summarizeHandoff(contention, ho)
	logf("3/8 contention: %d waiting processes SIGKILLed at the head of the queue", c.killReps)
	k, err := measureKill(ctx, e, c.killReps)
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	res.Kill = &k
	return nil
}

func (c config) faults(ctx context.Context, e *env, res *results) error {
	res.FaultLimit = fmt.Sprintf("at most %d cycles, and none started after %s", c.faultCycles, c.faultBudget)
	if !c.runs("faults") {
		return nil
	}
	faulty := []contender{
		redsyncContender(5, false), redsyncContender(5, true),
		redlockContender(5, ""), redlockContender(5, "fencing", redlock.WithFencing()),
	}
	logf("4/8 faults: %d contenders × SIGSTOP, SIGKILL; %s each", len(faulty), res.FaultLimit)
	for _, fault := range []string{faultPause, faultKill} {
		for _, fc := range faulty {
			f, err := measureFault(ctx, e, fc, fault, c.faultCycles, c.faultBudget)
			if err != nil {
				return err
			}
			res.Faults = append(res.Faults, faultRow{Name: fc.Name, Lib: fc.Lib, Fault: fault, faultResult: f})
		}
	}
	return nil
}

func (c config) scaling(ctx context.Context, e *env, res *results) error {
	if !c.runs("scaling") {
		return nil
	}
	scaling := []contender{floorContender()}
	for _, n := range []int{1, 3, 5, 7} {
		scaling = append(scaling, redlockContender(n, ""))
	}
	for _, n := range []int{1, 3, 5, 7} {
		scaling = append(scaling, redsyncContender(n, false))
	}
	logf("5/8 scaling: %d contenders × %d rounds × %d cycles", len(scaling), c.rounds, c.cycles)
	sc, err := measureCycles(ctx, e, scaling, c.rounds, c.cycles, "scale")
	if err != nil {
		return err
	}
	res.Scaling = summarizeCycles(scaling, sc)
	return nil
}

func (c config) wan(ctx context.Context, e *env, res *results) error {
	if !c.runs("wan") {
		return nil
	}
	wan := c.keep([]contender{redsyncContender(5, false), bareContender(5), redlockContender(5, "")})
	logf("6/8 WAN: %d contenders behind proxies adding %v ms × %d rounds × %d cycles, then 2 hand-off contenders × %d rounds × %s", len(wan), wanLatencies, c.wanRounds, c.wanCycles, c.wanRounds, c.cont)
	w, err := measureWAN(ctx, e, wan, c.wanRounds, c.wanCycles, c.cont)
	if err != nil {
		return err
	}
	res.WAN = &w
	return nil
}

func (c config) failover(ctx context.Context, e *env, res *results) error {
	if !c.runs("failover") {
		return nil
	}
	logf("7/8 failover: 5 candidate processes, %d resignations and %d leaders SIGKILLed, healthy and with one node SIGSTOPped or SIGKILLed", c.resigns, c.kills)
	f, err := measureFailover(ctx, e, c.resigns, c.kills)
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	res.Failover = &f
	return nil
}

func (c config) fairness(ctx context.Context, e *env, res *results) error {
	if !c.runs("fairness") {
		return nil
	}
	ps := primitives()
	counts := []int{4, 16}
	logf("8/8 fairness: %d primitives × %v processes × %d rounds × %s", len(ps), counts, c.contRounds, c.cont)
	f, err := measureFairness(ctx, e, ps, counts, c.contRounds, c.cont)
	if err != nil {
		return fmt.Errorf("fairness: %w", err)
	}
	for _, p := range ps {
		for _, n := range counts {
			res.Fairness = append(res.Fairness, summarizeFairness(fairName(p, n), f[fairName(p, n)]))
		}
	}
	return nil
}
