package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// results is everything one run measured, as medians over its rounds. It is
// also written as JSON beside the charts.
type results struct {
	Date, Go, Redis, Command string
	CPUs                     int
	Libraries                map[string]string // module path → version
	Rounds, Cycles           int
	Throughput, Contention   time.Duration // per contender per round
	Elapsed                  time.Duration

	Cycle      []cycleRow
	Tput       []tputRow // 32 goroutines
	Tput256    []tputRow // 256 goroutines
	Handoff    []handoffRow
	Kill       *killResult
	Faults     []faultRow
	Scaling    []cycleRow
	WAN        *wanResult
	Failover   *failoverResult
	FaultLimit string // the bound on each fault run, as printed
}

type cycleRow struct {
	Name, Lib string
	Nodes     int
	P50, P99  time.Duration
	Ratio     float64 // p50 ÷ the floor's p50, over all cycles
	RatioMin  float64 // the same over groups of consecutive rounds
	RatioMax  float64
	Allocs    float64
}

type tputRow struct {
	Name, Lib string
	tputRound
	Ratio float64 // ÷ bsm/redislock, median of the rounds' ratios
}

type handoffRow struct {
	Name, Lib string
	handoffRound
}

type faultRow struct {
	Name, Lib, Fault string
	faultResult
}

// bareName is the bare fan-out's row, the uncontended cycle's reference.
var bareName = bareContender(5).Name

// ratioGroups is how many groups of consecutive rounds the ratio's spread
// is computed over.
const ratioGroups = 5

// summarizeCycles pools each contender's samples: p50 and p99 over all its
// cycles, and the p50 ratio to contender 0 (the floor) over all cycles. The
// ratio's range is over groups of consecutive rounds.
func summarizeCycles(cs []contender, ss []cycleSamples) []cycleRow {
	pooled := func(s cycleSamples, from, to int) []time.Duration {
		var all []time.Duration
		for _, t := range s.Times[from:to] {
			all = append(all, t...)
		}
		return sorted(all)
	}
	rounds := len(ss[0].Times)
	groups := min(ratioGroups, rounds)
	floor := pct(pooled(ss[0], 0, rounds), 0.5)
	rows := make([]cycleRow, len(cs))
	for i, c := range cs {
		all := pooled(ss[i], 0, rounds)
		row := cycleRow{Name: c.Name, Lib: c.Lib, Nodes: c.Nodes, P50: pct(all, 0.5), P99: pct(all, 0.99),
			Allocs: median(ss[i].Allocs)}
		row.Ratio = float64(row.P50) / float64(floor)
		row.RatioMin, row.RatioMax = math.Inf(1), 0
		for g := range groups {
			from, to := g*rounds/groups, (g+1)*rounds/groups
			r := float64(pct(pooled(ss[i], from, to), 0.5)) / float64(pct(pooled(ss[0], from, to), 0.5))
			row.RatioMin, row.RatioMax = min(row.RatioMin, r), max(row.RatioMax, r)
		}
		rows[i] = row
	}
	return rows
}

func summarizeThroughput(cs []contender, rs [][]tputRound, ref int) []tputRow {
	rows := make([]tputRow, len(cs))
	for i, c := range cs {
		var per, ratios []float64
		var ccpu, scpu []time.Duration
		for r, t := range rs[i] {
			per, ratios = append(per, t.PerSec), append(ratios, t.PerSec/rs[ref][r].PerSec)
			ccpu, scpu = append(ccpu, t.ClientCPU), append(scpu, t.ServerCPU)
		}
		rows[i] = tputRow{Name: c.Name, Lib: c.Lib, Ratio: median(ratios),
			tputRound: tputRound{PerSec: median(per), ClientCPU: median(ccpu), ServerCPU: median(scpu)}}
	}
	return rows
}

func summarizeHandoff(cs []contended, rs [][]handoffRound) []handoffRow {
	rows := make([]handoffRow, len(cs))
	for i, c := range cs {
		var per, other, att, order []float64
		var g50, g99, o99, l99 []time.Duration
		errs := 0
		for _, h := range rs[i] {
			per, other, att = append(per, h.PerSec), append(other, h.ToOther), append(att, h.Attempts)
			order = append(order, h.InOrder)
			g50, g99, l99 = append(g50, h.GapP50), append(g99, h.GapP99), append(l99, h.LockP99)
			o99 = append(o99, h.OtherP99)
			errs += h.Errors
		}
		name := handoffName(c)
		rows[i] = handoffRow{Name: name, Lib: c.Lib, handoffRound: handoffRound{
			PerSec: median(per), ToOther: median(other), GapP50: median(g50), GapP99: median(g99), OtherP99: median(o99),
			LockP99: median(l99), Attempts: median(att), InOrder: median(order), Errors: errs}}
	}
	return rows
}

// handoffName is a contention row's name: "redlock, 5 nodes, 16 processes"
// or "…, 16 goroutines of one Client".
func handoffName(c contended) string {
	if c.Shared {
		return fmt.Sprintf("%s, %d goroutines of one Client", c.Name, c.workers())
	}
	return fmt.Sprintf("%s, %d processes", c.Name, c.workers())
}

// orDash formats v, or "–" when it is 0 (not measured).
func orDash(v float64, format string) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// row returns the row named name, or the zero row.
func row[T any](rows []T, name func(T) string, want string) (T, bool) {
	for _, r := range rows {
		if name(r) == want {
			return r, true
		}
	}
	var zero T
	return zero, false
}

// markdown renders the results as the generated section of
// docs/performance.md, with the charts at chartDir (relative to the doc).
func (r *results) markdown(chartDir string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("_Generated by `make bench` (bench/, its own Go module) on %s, in %s: Redis %s, %s, %d CPUs shared by every server and the client. ", r.Date, r.Elapsed.Round(time.Second), r.Redis, r.Go, r.CPUs)
	var libs []string
	for _, m := range []string{"github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/go-redis/v9"} {
		libs = append(libs, fmt.Sprintf("%s %s", m, r.Libraries[m]))
	}
	p("Libraries: %s. redlock's go-redis clients have the node options its README recommends (DialerRetries 1, ContextTimeoutEnabled); every other contender's have go-redis's defaults. ", strings.Join(libs, ", "))
	p("Contenders run interleaved (A B C A B C …) in rounds, so that a slow spell of the machine lands on all of them. Compare ratios, not absolute times: they move from run to run on this shared machine._\n\n")

	p("### Targets (redlock, 5 nodes, default options, the README's node options)\n\n")
	p("| measure | target | redlock | redsync v4, 5 nodes (defaults) | |\n| --- | --- | --- | --- | --- |\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	name := func(c cycleRow) string { return c.Name }
	rl5, haveCycle := row(r.Cycle, name, "redlock, 5 nodes")
	rs5, _ := row(r.Cycle, name, "redsync v4, 5 nodes")
	bare, haveBare := row(r.Cycle, name, bareName)
	fenced, haveFenced := row(r.Cycle, name, "redlock, 5 nodes, fencing")
	if haveCycle && haveBare {
		p("| cycle p50 ÷ bare go-redis fan-out's (same run) | ≤ 1.00× | %.2f× | %.2f× | %s |\n", float64(rl5.P50)/float64(bare.P50), float64(rs5.P50)/float64(bare.P50), verdict(rl5.P50 <= bare.P50))
	}
	if haveCycle {
		p("| cycle p50 ÷ floor | | %.2f× | %.2f× | |\n", rl5.Ratio, rs5.Ratio)
		p("| allocations per cycle | ≤ 60 | %.0f | %.0f | %s |\n", rl5.Allocs, rs5.Allocs, verdict(rl5.Allocs <= 60))
	}
	if haveCycle && haveFenced {
		extra := float64(fenced.P50)/float64(rl5.P50) - 1
		p("| what fencing adds to the cycle p50 | ≤ 15%% | %+.0f%% | (no fencing) | %s |\n", 100*extra, verdict(extra <= 0.15))
	}
	tname := func(t tputRow) string { return t.Name }
	for _, tp := range []struct {
		rows    []tputRow
		workers int
		target  float64
	}{{r.Tput, 32, 0.7}, {r.Tput256, 256, 1.2}} {
		trl, have := row(tp.rows, tname, "redlock, 5 nodes")
		trs, _ := row(tp.rows, tname, "redsync v4, 5 nodes")
		if have {
			p("| throughput, %d goroutines, ÷ bsm/redislock (1 node) | ≥ %.1f× | %.3f× | %.3f× | %s |\n", tp.workers, tp.target, trl.Ratio, trs.Ratio, verdict(trl.Ratio >= tp.target))
		}
	}
	fname := func(f faultRow) string { return f.Name + "/" + f.Fault }
	for _, fault := range []string{faultPause, faultKill} {
		frl, have := row(r.Faults, fname, "redlock, 5 nodes/"+fault)
		frs, _ := row(r.Faults, fname, "redsync v4, 5 nodes/"+fault)
		if have {
			p("| one node %s: Lock p99 | ≤ 2 ms | %s | %s | %s |\n", map[string]string{faultPause: "hung", faultKill: "killed"}[fault], fmtDur(frl.LockP99), fmtDur(frs.LockP99), verdict(frl.Cycles > 0 && frl.LockP99 <= 2*time.Millisecond))
		}
	}
	if r.WAN != nil {
		wname := func(w wanRow) string { return w.Name }
		wrl, have := row(r.WAN.Rows, wname, "redlock, 5 nodes")
		wrs, _ := row(r.WAN.Rows, wname, "redsync v4, 5 nodes")
		if have {
			p("| nodes %v ms away: Lock p99 − the third-fastest node's round trip p99 (%s) | ≤ 1 ms | %s | %s | %s |\n", r.WAN.Latencies, fmtDur(r.WAN.ThirdP99),
				fmtSigned(wrl.LockP99-r.WAN.ThirdP99), fmtSigned(wrs.LockP99-r.WAN.ThirdP99), verdict(wrl.LockP99-r.WAN.ThirdP99 <= time.Millisecond))
		}
	}
	hname := func(h handoffRow) string { return h.Name }
	for _, n := range []int{4, 16} {
		proc := fmt.Sprintf(", %d processes", n)
		hrl, have := row(r.Handoff, hname, "redlock, 5 nodes"+proc)
		one, haveOne := row(r.Handoff, hname, fmt.Sprintf("redlock, 5 nodes, %d goroutines of one Client", n))
		hrs, _ := row(r.Handoff, hname, "redsync v4, 5 nodes"+proc)
		if !have {
			continue
		}
		p("| %d processes on one key: attempts per acquisition | ≤ 1.2 | %.2f | %s | %s |\n", n, hrl.Attempts, orDash(hrs.Attempts, "%.2f"), verdict(hrl.Attempts <= 1.2))
		p("| %d processes: acquisitions in ticket order | ≥ 95%% | %.1f%% | %s (arrival order) | %s |\n", n, 100*hrl.InOrder, orDash(100*hrs.InOrder, "%.1f%%"), verdict(hrl.InOrder >= 0.95))
		p("| %d processes: hand-off gap p99 | ≤ 1 ms | %s | %s | %s |\n", n, fmtDur(hrl.GapP99), fmtDur(hrs.GapP99), verdict(hrl.GapP99 > 0 && hrl.GapP99 <= time.Millisecond))
		if haveOne {
			ratio := float64(hrl.LockP99) / float64(one.LockP99)
			p("| %d processes: Lock p99 ÷ the same load in one Client (%s) | ≤ 1.5× | %.2f× (%s) | | %s |\n", n, fmtDur(one.LockP99), ratio, fmtDur(hrl.LockP99), verdict(ratio <= 1.5))
		}
	}
	if f := r.Failover; f != nil && len(f.Rows) > 0 {
		h := f.Rows[0]
		p("| election, 5 candidate processes: Resign → next leader p99 | ≤ 10 ms | %s (p50 %s) | | %s |\n", fmtDur(h.ResignP99), fmtDur(h.ResignP50), verdict(h.ResignP99 <= 10*time.Millisecond))
		p("| election: leader SIGKILLed → next leader p99 (TTL %s) | ≤ TTL + 50 ms | %s (p50 %s) | | %s |\n", fmtDur(f.TTL), fmtDur(h.KillP99), fmtDur(h.KillP50), verdict(h.Kills > 0 && h.KillP99 <= f.TTL+50*time.Millisecond))
		early := 0
		for _, x := range f.Rows {
			early += x.Early
		}
		p("| election: next leaders before the killed leader's validity ended | 0 | %d | | %s |\n", early, verdict(early == 0))
		for _, x := range f.Rows[1:] {
			dr, dk := x.ResignP99-h.ResignP99, x.KillP99-h.KillP99
			p("| election, %s: change in Resign / SIGKILL p99 | ≤ node timeout (%s) | %s / %s | | %s |\n", x.Condition, fmtDur(f.NodeTimeout), fmtSigned(dr), fmtSigned(dk), verdict(dr <= f.NodeTimeout && dk <= f.NodeTimeout))
		}
	}
	if k := r.Kill; k != nil {
		p("| waiting process SIGKILLed at the head of the queue: next acquisition after the kill, worst of %d (lease %s) | ≤ lease + 10 ms | %s (p50 %s) | | %s |\n", k.Reps, fmtDur(k.Lease), fmtDur(k.Max), fmtDur(k.P50), verdict(k.Max <= k.Lease+10*time.Millisecond))
	}
	p("\n")

	p("### 1. Uncontended Lock+Unlock\n\n")
	p("%d rounds of %d cycles per contender, each cycle on a fresh key; p50 and p99 are over all %d cycles. ÷ floor is the ratio of the p50s, and in brackets its range over %d groups of consecutive rounds. Allocations are the whole process's heap allocations per cycle (go-redis's included), median over the rounds.\n\n", r.Rounds, r.Cycles, r.Rounds*r.Cycles, ratioGroups)
	p("![Uncontended cycle p50 ÷ floor](%s/cycle.svg)\n\n", chartDir)
	p("| contender | p50 | p99 | p50 ÷ floor | allocs/cycle |\n| --- | --- | --- | --- | --- |\n")
	for _, c := range r.Cycle {
		p("| %s | %s | %s | %.2f× (%.2f–%.2f) | %.0f |\n", c.Name, fmtDur(c.P50), fmtDur(c.P99), c.Ratio, c.RatioMin, c.RatioMax, c.Allocs)
	}

	p("\n### 2. Throughput\n\nEach contender's goroutines lock and unlock a key of their own through one shared instance (one process), for %s per contender per round: 32 goroutines, then 256. Every contender is checked afterwards to have left no lock key on any server.\n\n", r.Throughput)
	p("![Throughput ÷ bsm/redislock, 32 goroutines](%s/throughput.svg)\n\n![Throughput ÷ bsm/redislock, 256 goroutines](%s/throughput256.svg)\n\n", chartDir, chartDir)
	for _, tp := range []struct {
		rows    []tputRow
		workers int
	}{{r.Tput, 32}, {r.Tput256, 256}} {
		if len(tp.rows) == 0 {
			continue
		}
		p("| %d goroutines | cycles/s | ÷ bsm/redislock | client CPU per cycle | servers' CPU per cycle |\n| --- | --- | --- | --- | --- |\n", tp.workers)
		for _, t := range tp.rows {
			p("| %s | %.0f | %.3f× | %s | %s |\n", t.Name, t.PerSec, t.Ratio, fmtDur(t.ClientCPU), fmtDur(t.ServerCPU))
		}
		p("\n")
	}

	p("\n### 3. Contention and hand-off\n\n")
	p("4 (or 16) goroutines contend for one key, each holding it 1 ms and going straight back for it, for %s per contender per round. *N processes* gives each goroutine an instance (Client) of its own, as separate processes would have; *goroutines of one Client* share one. The gap is from the start of Unlock to the next holder's Lock returning; attempts count every acquire attempt, failed ones included (redlock's looks at its wait queue are not attempts: they cannot grant). *In order* is the share of acquisitions served before every acquisition with an earlier ticket that was served after them: redlock's ticket is when the Lock call queued (Event.Queued), or its start when it got the lock at once; the other libraries have no queue, so their Lock call's start stands in. bsm/redislock waits with `LinearBackoff(1ms)` (its default is not to wait); redsync's tuned retry waits 1–3 ms between unlimited tries instead of 50–250 ms between 32.\n\n", r.Contention)
	p("![Hand-off gap p99, to another goroutine](%s/handoff.svg)\n\n", chartDir)
	p("![Contended Lock p99](%s/waiting.svg)\n\n", chartDir)
	p("| contender | acquisitions/s | to another goroutine | gap p50 | gap p99 | gap p99, to another | attempts/acquisition | in order | Lock p99 | Lock calls that gave up |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, h := range r.Handoff {
		p("| %s | %.0f | %.1f%% | %s | %s | %s | %.2f | %.1f%% | %s | %d |\n", h.Name, h.PerSec, 100*h.ToOther, fmtDur(h.GapP50), fmtDur(h.GapP99), fmtDur(h.OtherP99), h.Attempts, 100*h.InOrder, fmtDur(h.LockP99), h.Errors)
	}
	if k := r.Kill; k != nil {
		p("\nA waiting process SIGKILLed at the head of the wait queue (redlock, 5 nodes, default options): a holder takes the key, a separate process queues for it, then a waiter in the bench process queues behind it; the process is SIGKILLed and the holder releases at once. Its place lapses within one waiter lease (%s) of its last refresh. Time from the kill to the second waiter's Lock returning, %d times: p50 %s, worst %s.\n", fmtDur(k.Lease), k.Reps, fmtDur(k.P50), fmtDur(k.Max))
	}

	p("\n### 4. One of 5 nodes hung or dead\n\n")
	p("The contender is warmed up, then its 5th node is frozen (SIGSTOP: it accepts connections and never answers) or killed (SIGKILL: connections refused), and it locks and unlocks fresh keys: %s. The node is resumed, or restarted on its port, afterwards. go-redis defaults: 3 s read timeout, 5 dial attempts.\n\n", r.FaultLimit)
	p("![Lock p99 with one node hung](%s/faults.svg)\n\n", chartDir)
	p("| contender | fault | cycles | Lock p50 | Lock p99 | Unlock p50 | Unlock p99 | failed calls |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, f := range r.Faults {
		p("| %s | %s | %d | %s | %s | %s | %s | %d |\n", f.Name, f.Fault, f.Cycles, fmtDur(f.LockP50), fmtDur(f.LockP99), fmtDur(f.UnlockP50), fmtDur(f.UnlockP99), f.Errors)
	}

	p("\n### 5. Scaling with the number of nodes\n\nUncontended cycles as in 1, on 1, 3, 5 and 7 nodes.\n\n")
	p("![Cycle p50 by node count](%s/scaling.svg)\n\n", chartDir)
	p("| contender | p50 | p99 | p50 ÷ floor | allocs/cycle |\n| --- | --- | --- | --- | --- |\n")
	for _, c := range r.Scaling {
		p("| %s | %s | %s | %.2f× | %.0f |\n", c.Name, fmtDur(c.P50), fmtDur(c.P99), c.Ratio, c.Allocs)
	}
	if w := r.WAN; w != nil {
		p("\n### 6. Nodes at WAN distances\n\n")
		p("The 5 lock nodes sit behind in-process toxiproxy (v2.12.0) proxies that delay each node's replies by %v ms (± a fifth), as if two nodes were near, one a region away and two far. %d rounds of %d Lock+Unlock cycles per contender, interleaved; Lock and Unlock are timed apart. A majority is 3 of 5, so a lock that returns at a majority waits for the third-fastest node; one that waits for every node waits for the farthest. Round trips through each proxy (PING, warm connection): ", w.Latencies, w.Rounds, w.Cycles)
		var nodes []string
		for i := range w.NodeP50 {
			nodes = append(nodes, fmt.Sprintf("%s / %s", fmtDur(w.NodeP50[i]), fmtDur(w.NodeP99[i])))
		}
		p("%s (p50 / p99).\n\n", strings.Join(nodes, ", "))
		p("![Lock p99 with nodes at WAN distances](%s/wan.svg)\n\n", chartDir)
		p("| contender | cycles | Lock p50 | Lock p99 | Unlock p50 | Unlock p99 |\n| --- | --- | --- | --- | --- | --- |\n")
		p("| *the third-fastest node's round trip* | | %s | %s | | |\n", fmtDur(w.ThirdP50), fmtDur(w.ThirdP99))
		for _, x := range w.Rows {
			p("| %s | %d | %s | %s | %s | %s |\n", x.Name, x.Cycles, fmtDur(x.LockP50), fmtDur(x.LockP99), fmtDur(x.UnlockP50), fmtDur(x.UnlockP99))
		}
	}
	if f := r.Failover; f != nil {
		p("\n### 7. Leader election failover\n\n")
		p("5 candidate processes (the bench binary re-executed, default options but a %s TTL: node timeout %s) campaign in one election on the 5 lock nodes. %d times the leader resigns (and campaigns again): the time from just before its Resign to the next leader's Campaign returning, from the two processes' timestamps. Then %d times the leader process is SIGKILLed at a different point of its extension cycle (a new candidate replaces it): the time from the kill to the next leader, and the next leader's start minus the killed leadership's last validity end as the killed process computed it (never negative: no leader starts while an earlier one may still be valid). Healthy, then with the 5th node frozen (SIGSTOP), then with it killed.\n\n", fmtDur(f.TTL), fmtDur(f.NodeTimeout), f.Rows[0].Resigns, f.Rows[0].Kills)
		p("| condition | Resign → next p50 | p99 | SIGKILL → next p50 | p99 | next start − old validity end, min | p99 | early |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")
		for _, x := range f.Rows {
			p("| %s | %s | %s | %s | %s | %s | %s | %d |\n", x.Condition, fmtDur(x.ResignP50), fmtDur(x.ResignP99), fmtDur(x.KillP50), fmtDur(x.KillP99), fmtSigned(x.AfterValidMin), fmtDur(x.AfterValidP99), x.Early)
		}
	}
	return b.String()
}

// fmtSigned prints a duration that may be negative, with its sign.
func fmtSigned(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

// charts renders the SVG charts, by file name.
func (r *results) charts() map[string]string {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return map[string]string{
		"cycle.svg": barChart("Uncontended Lock+Unlock: p50 ÷ floor (lower is better)", "p50 ÷ floor (SET NX + EVALSHA on one node)",
			bars(r.Cycle, func(c cycleRow) bar { return bar{c.Name, c.Ratio, fmt.Sprintf("%.2f×", c.Ratio), c.Lib} }), false, 0, ""),
		"throughput.svg": barChart("Throughput, 32 goroutines on own keys (higher is better)", "cycles/s ÷ bsm/redislock",
			bars(r.Tput, func(t tputRow) bar { return bar{t.Name, t.Ratio, fmt.Sprintf("%.3f×", t.Ratio), t.Lib} }), false, 0.7, "target 0.7×"),
		"throughput256.svg": barChart("Throughput, 256 goroutines on own keys (higher is better)", "cycles/s ÷ bsm/redislock",
			bars(r.Tput256, func(t tputRow) bar { return bar{t.Name, t.Ratio, fmt.Sprintf("%.3f×", t.Ratio), t.Lib} }), false, 1.2, "target 1.2×"),
		"handoff.svg": barChart("Hand-off to another goroutine: gap p99, 4 or 16 goroutines, 1 ms holds (lower is better)", "milliseconds, log scale",
			bars(r.Handoff, func(h handoffRow) bar { return bar{h.Name, ms(h.OtherP99), fmtDur(h.OtherP99), h.Lib} }), true, 3, "3 ms"),
		"waiting.svg": barChart("Contended Lock p99: how long a waiter waits, 4 or 16 goroutines, 1 ms holds", "milliseconds, log scale",
			bars(r.Handoff, func(h handoffRow) bar { return bar{h.Name, ms(h.LockP99), fmtDur(h.LockP99), h.Lib} }), true, 0, ""),
		"faults.svg": barChart("Lock p99 with one of 5 nodes hung (SIGSTOP) or dead (SIGKILL)", "milliseconds, log scale",
			bars(r.Faults, func(f faultRow) bar { return bar{f.Name + ", " + f.Fault, ms(f.LockP99), fmtDur(f.LockP99), f.Lib} }), true, 2, "target 2 ms"),
		"wan.svg": barChart("Lock p99 with nodes 1, 1, 5, 20 and 50 ms away (lower is better)", "milliseconds, log scale",
			wanBars(r.WAN), true, 0, ""),
		"scaling.svg": barChart("Uncontended cycle p50 by node count (lower is better)", "microseconds",
			bars(r.Scaling, func(c cycleRow) bar {
				return bar{c.Name, float64(c.P50) / float64(time.Microsecond), fmtDur(c.P50), c.Lib}
			}), false, 0, ""),
	}
}

// wanBars is the WAN chart's bars: the third-fastest node's round trip,
// then each contender's Lock p99.
func wanBars(w *wanResult) []bar {
	if w == nil {
		return nil
	}
	out := []bar{{"the third-fastest node's round trip", float64(w.ThirdP99) / float64(time.Millisecond), fmtDur(w.ThirdP99), "floor"}}
	for _, x := range w.Rows {
		out = append(out, bar{x.Name, float64(x.LockP99) / float64(time.Millisecond), fmtDur(x.LockP99), x.Lib})
	}
	return out
}

func bars[T any](rows []T, f func(T) bar) []bar {
	out := make([]bar, len(rows))
	for i, r := range rows {
		out[i] = f(r)
	}
	return out
}

// Markers around the generated part of docs/performance.md.
const (
	beginMarker = "<!-- bench:begin (generated by make bench; edits here are overwritten) -->"
	endMarker   = "<!-- bench:end -->"
)

var errNoMarkers = errors.New("the document has no " + beginMarker + " … " + endMarker + " section")

// splice replaces the text between the markers in doc with section.
func splice(doc []byte, section string) ([]byte, error) {
	i := bytes.Index(doc, []byte(beginMarker))
	j := bytes.Index(doc, []byte(endMarker))
	if i < 0 || j < i {
		return nil, errNoMarkers
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(beginMarker)])
	out.WriteString("\n")
	out.WriteString(section)
	out.WriteString("\n")
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// publish writes the charts and results.json into chartDir and splices the
// markdown into docPath.
func (r *results) publish(docPath, chartDir string, resultsJSON []byte) error {
	if err := os.MkdirAll(chartDir, 0o755); err != nil {
		return err
	}
	for name, svg := range r.charts() {
		if err := os.WriteFile(filepath.Join(chartDir, name), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(chartDir, "results.json"), resultsJSON, 0o644); err != nil {
		return err
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(docPath), chartDir)
	if err != nil {
		return err
	}
	out, err := splice(doc, r.markdown(filepath.ToSlash(rel)))
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	return os.WriteFile(docPath, out, 0o644)
}
