package main

import (
	"encoding/xml"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	s := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want int
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := pct(s, tc.q); got != tc.want {
			t.Errorf("pct(1..10, %v) = %d, want %d", tc.q, got, tc.want)
		}
	}
	if got := pct([]int(nil), 0.5); got != 0 {
		t.Errorf("pct(empty) = %d", got)
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median = %v, want 2", got)
	}
}

func TestSummarizeCycles(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	cs := []contender{{Name: "floor", Lib: "floor"}, {Name: "x", Lib: "redlock"}}
	ss := []cycleSamples{
		{Times: [][]time.Duration{ms(1, 1, 1), ms(2, 2, 2)}, Allocs: []float64{10, 10}},
		{Times: [][]time.Duration{ms(3, 3, 3), ms(4, 4, 4)}, Allocs: []float64{50, 52}},
	}
	rows := summarizeCycles(cs, ss)
	x := rows[1]
	// Pooled: floor 1,1,1,2,2,2 (p50 1 ms); x 3,3,3,4,4,4 (p50 3 ms).
	if x.P50 != 3*time.Millisecond || x.P99 != 4*time.Millisecond || x.Ratio != 3 {
		t.Fatalf("got p50 %v p99 %v ratio %v, want 3ms 4ms 3", x.P50, x.P99, x.Ratio)
	}
	// Groups: round 0 ratio 3, round 1 ratio 2.
	if x.RatioMin != 2 || x.RatioMax != 3 || x.Allocs != 50 {
		t.Fatalf("got range %v–%v allocs %v, want 2–3 and 50", x.RatioMin, x.RatioMax, x.Allocs)
	}
}

func TestSplice(t *testing.T) {
	doc := []byte("# Perf\n\nhand-written\n\n" + beginMarker + "\nold\n" + endMarker + "\n\nmore hand-written\n")
	out, err := splice(doc, "new")
	if err != nil {
		t.Fatal(err)
	}
	want := "# Perf\n\nhand-written\n\n" + beginMarker + "\nnew\n" + endMarker + "\n\nmore hand-written\n"
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	again, _ := splice(out, "new")
	if string(again) != want {
		t.Fatal("splicing twice changed the document")
	}
	if _, err := splice([]byte("no markers"), "x"); !errors.Is(err, errNoMarkers) {
		t.Fatalf("got %v, want errNoMarkers", err)
	}
}

// TestCharts renders every chart from a small result set and checks that
// each is well-formed XML with one bar per row.
func TestCharts(t *testing.T) {
	r := &results{
		Cycle:   []cycleRow{{Name: "floor", Lib: "floor", Ratio: 1}, {Name: "a & <b>", Lib: "redlock", Ratio: 2.5}},
		Tput:    []tputRow{{Name: "t", Lib: "redislock", Ratio: 1}},
		Tput256: []tputRow{{Name: "u", Lib: "bare", Ratio: 1.5}},
		Handoff: []handoffRow{{Name: "h", Lib: "redsync", handoffRound: handoffRound{OtherP99: 100 * time.Millisecond}}, {Name: "k", Lib: "redlock", handoffRound: handoffRound{OtherP99: time.Millisecond}}},
		Faults:  []faultRow{{Name: "f", Lib: "redsync", Fault: faultPause, faultResult: faultResult{LockP99: 5 * time.Second}}},
		Scaling: []cycleRow{{Name: "s", Lib: "redlock", P50: 300 * time.Microsecond}},
		WAN:     &wanResult{Rows: []wanRow{{Name: "w", Lib: "redlock", LockP99: 6 * time.Millisecond}}, ThirdP99: 5 * time.Millisecond},
	}
	charts := r.charts()
	for _, name := range []string{"cycle.svg", "throughput.svg", "handoff.svg", "waiting.svg", "faults.svg", "scaling.svg", "throughput256.svg", "wan.svg"} {
		svg, ok := charts[name]
		if !ok {
			t.Fatalf("no %s", name)
		}
		d := xml.NewDecoder(strings.NewReader(svg))
		rects := 0
		for {
			tok, err := d.Token()
			if err != nil {
				if err.Error() != "EOF" {
					t.Fatalf("%s: %v", name, err)
				}
				break
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
				rects++
			}
		}
		if rects < 2 { // the background and at least one bar
			t.Errorf("%s has %d rects", name, rects)
		}
	}
	if !strings.Contains(charts["cycle.svg"], "a &amp; &lt;b&gt;") {
		t.Error("labels are not escaped")
	}
	md := r.markdown("bench")
	for _, want := range []string{"](bench/cycle.svg)", "| a & <b> |"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for raw, want := range map[float64]float64{0.3: 0.5, 1: 1, 1.5: 2, 3: 5, 7: 10, 120: 200} {
		if got := niceStep(raw); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", raw, got, want)
		}
	}
}

// TestFailoverTargets: the failover rows of the targets table judge the
// issue's bounds, and a leader that began early is a miss.
func TestFailoverTargets(t *testing.T) {
	ms := time.Millisecond
	r := &results{Failover: &failoverResult{TTL: time.Second, NodeTimeout: 50 * ms, Rows: []failoverRow{
		{Condition: "healthy", Resigns: 100, ResignP50: 1 * ms, ResignP99: 1500 * time.Microsecond, Kills: 10, KillP50: 900 * ms, KillP99: 1000 * ms},
		{Condition: "one node SIGSTOPped", Resigns: 100, ResignP99: 70 * ms, Kills: 10, KillP99: 1010 * ms},
		{Condition: "one node SIGKILLed", Resigns: 100, ResignP99: 7 * ms, Kills: 10, KillP99: 1001 * ms, Early: 1},
	}}}
	md := r.markdown("charts")
	for _, want := range []string{
		"Resign → next leader p99 | ≤ 2 ms | 1.50 ms (p50 1.00 ms) | | met |",
		"next leaders before the killed leader's validity ended | 0 | 1 | | **missed** |",
		"one node SIGSTOPped: change in Resign / SIGKILL p99 | ≤ node timeout (50 ms) | +68 ms / +10 ms | | **missed** |",
		"one node SIGKILLed: change in Resign / SIGKILL p99 | ≤ node timeout (50 ms) | +5.50 ms / +1.00 ms | | met |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
}

// TestSplitKinds: a writer's release lets in two readers, a writer follows
// them from the last reader's release, and another writer follows it.
func TestSplitKinds(t *testing.T) {
	at := func(ms int) time.Time { return time.UnixMilli(int64(ms)) }
	k := []string{"k"}
	w1 := &fairAcq{w: 0, keys: k, start: at(0), got: at(1), released: at(10)}
	r1 := &fairAcq{w: 1, keys: k, reader: true, start: at(2), got: at(11), released: at(13)}
	r2 := &fairAcq{w: 2, keys: k, reader: true, start: at(3), got: at(12), released: at(14)}
	w2 := &fairAcq{w: 3, keys: k, start: at(4), got: at(17), released: at(20)}
	w3 := &fairAcq{w: 0, keys: k, start: at(11), got: at(24), released: at(30)}
	f := &fairness{acqs: []*fairAcq{w1, r1, r2, w2, w3}}
	r := f.figures(4, time.Second, 0)
	want := &rwKinds{Batch: 2,
		ToReaders: gapPair{time.Millisecond, 2 * time.Millisecond},
		ToWriter:  gapPair{3 * time.Millisecond, 3 * time.Millisecond},
		Writers:   gapPair{4 * time.Millisecond, 4 * time.Millisecond}}
	if r.Kinds == nil || *r.Kinds != *want {
		t.Fatalf("kinds %+v, want %+v", r.Kinds, want)
	}
	w4 := &fairAcq{w: 1, keys: k, start: at(5), got: at(12), released: at(15)}
	if m := (&fairness{acqs: []*fairAcq{w1, w4}}).figures(2, time.Second, 0); m.GapP50 == 0 || m.Kinds != nil {
		t.Fatalf("a mutex's round: gap p50 %v, kinds %+v; want a gap and no kinds", m.GapP50, m.Kinds)
	}
}

// TestRoundOrder: each round runs every contender once, the same round in
// the same order (a run can be had again), and over 40 rounds no
// contender always follows the same one.
func TestRoundOrder(t *testing.T) {
	const n, rounds = 10, 40
	after := map[[2]int]int{} // (previous, next) → rounds
	for r := range rounds {
		order := roundOrder(n, r)
		if !slices.Equal(order, roundOrder(n, r)) {
			t.Fatalf("round %d: two orders, %v and %v", r, order, roundOrder(n, r))
		}
		if s := slices.Sorted(slices.Values(order)); !slices.Equal(s, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Fatalf("round %d: %v is not a permutation of the %d contenders", r, order, n)
		}
		for i := 1; i < n; i++ {
			after[[2]int{order[i-1], order[i]}]++
		}
	}
	for pair, k := range after {
		if k > rounds/2 {
			t.Errorf("contender %d ran after %d in %d of %d rounds", pair[1], pair[0], k, rounds)
		}
	}
}

// TestEvalCalls: the scripts a node ran are its EVALSHA and EVAL calls in
// INFO commandstats, and nothing else (not EVALSHA_RO, nor the commands
// the scripts call).
func TestEvalCalls(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_zadd:calls=900,usec=1200,usec_per_call=1.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=120,usec=9000,usec_per_call=75.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha_ro:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=3,usec=300,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n"
	if got, err := evalCalls(info); err != nil || got != 123 {
		t.Fatalf("evalCalls = %d, %v; want 123", got, err)
	}
	if _, err := evalCalls("cmdstat_evalsha:calls=x,usec=1\r\n"); err == nil {
		t.Fatal("a malformed count was read as a number")
	}
}
