package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	ContentionHold           time.Duration // how long each contention holder holds the key
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
	Fairness   []fairRow
	FaultLimit string // the bound on each fault run, as printed
}

// fairRow is one primitive with one count of processes, as medians over
// the rounds (section 8).
type fairRow struct {
	Name string
	fairRound
}

func summarizeFairness(name string, rs []fairRound) fairRow {
	var per, att, order, least []float64
	var g50, g99, a99, cpu []time.Duration
	var alone, scripts []float64
	errs := 0
	for _, f := range rs {
		scripts = append(scripts, f.NodeScripts)
		per, att, order, least = append(per, f.PerSec), append(att, f.Attempts), append(order, f.InOrder), append(least, f.Least)
		g50, g99 = append(g50, f.GapP50), append(g99, f.GapP99)
		alone, a99 = append(alone, f.Alone), append(a99, f.AloneGap99)
		cpu = append(cpu, f.ServerCPU)
		errs += f.Errors
	}
	return fairRow{Name: name, fairRound: fairRound{PerSec: median(per), Attempts: median(att), InOrder: median(order), Least: median(least),
		GapP50: median(g50), GapP99: median(g99), Alone: median(alone), AloneGap99: median(a99), Errors: errs, ServerCPU: median(cpu),
		NodeScripts: median(scripts), Kinds: summarizeKinds(rs)}}
}

// summarizeKinds is the medians over the rounds of a read-write lock's
// gaps by kind (nil for a primitive without readers).
func summarizeKinds(rs []fairRound) *rwKinds {
	var batch []float64
	var d [6][]time.Duration
	for _, f := range rs {
		if k := f.Kinds; k != nil {
			batch = append(batch, k.Batch)
			for i, v := range []time.Duration{k.ToReaders.P50, k.ToReaders.P99, k.ToWriter.P50, k.ToWriter.P99, k.Writers.P50, k.Writers.P99} {
				d[i] = append(d[i], v)
			}
		}
	}
	if len(batch) == 0 {
		return nil
	}
	return &rwKinds{Batch: median(batch), ToReaders: gapPair{median(d[0]), median(d[1])},
		ToWriter: gapPair{median(d[2]), median(d[3])}, Writers: gapPair{median(d[4]), median(d[5])}}
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
	Ratio      float64 // ÷ bsm/redislock, median of the rounds' ratios
	FloorRatio float64 // ÷ the floor (the first contender), likewise
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
		var per, ratios, floor []float64
		var ccpu, scpu []time.Duration
		for r, t := range rs[i] {
			per, ratios = append(per, t.PerSec), append(ratios, t.PerSec/rs[ref][r].PerSec)
			floor = append(floor, t.PerSec/rs[0][r].PerSec)
			ccpu, scpu = append(ccpu, t.ClientCPU), append(scpu, t.ServerCPU)
		}
		rows[i] = tputRow{Name: c.Name, Lib: c.Lib, Ratio: median(ratios), FloorRatio: median(floor),
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
		"handoff.svg": barChart("Hand-off to another goroutine: gap p99, 4 or 16 goroutines, "+r.ContentionHold.String()+" holds (lower is better)", "milliseconds, log scale",
			bars(r.Handoff, func(h handoffRow) bar { return bar{h.Name, ms(h.OtherP99), fmtDur(h.OtherP99), h.Lib} }), true, 3, "3 ms"),
		"waiting.svg": barChart("Contended Lock p99: how long a waiter waits, 4 or 16 goroutines, "+r.ContentionHold.String()+" holds", "milliseconds, log scale",
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
