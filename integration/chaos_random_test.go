//go:build chaos

package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// longHolds is sc with holdings of 120 ms, most of the 200 ms TTL of
// restartScenarioChaos: an overlap needs a holding that spans a frozen
// node's resume and another node's restart, and with 20 ms holdings five
// random runs found none (2026-11-29).
func longHolds(sc scenario) scenario {
	sc.hold = 120 * time.Millisecond
	return sc
}

// TestChaosRandomCanaries runs the canaries of TestChaosCanaries on random
// workloads instead of built schedules, and reports how many violations
// each run found: a measure of how often the unsafe configurations break
// under contention, not a test of the checker (that one is
// TestChaosCanaries, in make test). It runs under make chaos (tag chaos)
// and fails only if no run of a canary found any violation.
func TestChaosRandomCanaries(t *testing.T) {
	const runs = 5
	for _, c := range []struct {
		name   string
		kind   string // the violation that must show up
		target int
		sc     scenario
	}{
		{"restart without the guard", "overlap", 300, longHolds(
			restartScenarioChaos("guard off", 150*time.Millisecond, 300, redlock.WithRestartGuard(0)))},
		{"clock rate x2 on 2 of 3 nodes", "overlap", 60,
			scenario{name: "clock x2", rates: []float64{2, 2, 1}, offsetsMs: []int{0, 0, 0},
				hold: 150 * time.Millisecond, opts: []redlock.Option{redlock.WithTTL(200 * time.Millisecond)}}},
		{"client pauses past validity, unfenced store", "stale write", 300,
			scenario{name: "unfenced store", nodes: 5, opts: []redlock.Option{redlock.WithFencing()},
				pause: func(w, i int) time.Duration {
					if w == 0 && i%5 == 2 {
						return 700 * time.Millisecond
					}
					return 0
				}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			total := 0
			for run := range runs {
				o := runChaos(t, c.sc, c.target)
				found := 0
				for _, v := range o.violations {
					if strings.HasPrefix(v, c.kind) {
						found++
					}
				}
				t.Logf("run %d: %d %s violations in %d acquisitions", run+1, found, c.kind, o.acquisitions)
				total += found
			}
			if total == 0 {
				t.Fatalf("no %s in %d runs: the unsafe configuration did not break, or the checker is blind", c.kind, runs)
			}
		})
	}
}
