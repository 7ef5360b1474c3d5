//go:build redlock_search

package redlock

import (
	"flag"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

var splitPlans = flag.Int("split.plans", 1000, "TestGrantsSplitPlans: how many random split plans to run")

// TestGrantsSplitPlans runs the split schedule with -split.plans random
// plans (which waiters' joins land late on which nodes, and how late:
// 1-6 ms), for each primitive of the split tests: every Lock call must
// hold within 200 ms of the release. It searches for stalls the
// hand-written plans miss; run it with a few thousand plans after a
// change to the give-back (docs/testing.md). It is a search, not a
// canary (the Clients' IDs are random: a seed does not replay a plan
// exactly), so it is built only with -tags redlock_search, and CI does
// not run it.
func TestGrantsSplitPlans(t *testing.T) {
	defer func(kinds string) { rwKinds = kinds }(rwKinds)
	for seed := range uint64(*splitPlans) {
		r := rand.New(rand.NewPCG(seed, 7))
		var p splitPlan
		for i := range p.late {
			for j := range p.late[i] {
				p.late[i][j] = r.IntN(2) == 0
			}
		}
		p.after = time.Duration(1+r.IntN(6)) * time.Millisecond
		sa, name := lockSplit, "mutex"
		switch r.IntN(4) {
		case 1:
			sa, name = semaphoreSplit, "semaphore"
		case 2:
			sa, name = setSplit, "set"
		case 3:
			rwKinds = []string{"wwww", "wrww", "wwrw", "wwwr"}[r.IntN(4)]
			sa, name = rwSplit, "read-write "+rwKinds
		}
		var took []time.Duration
		synctest.Test(t, func(t *testing.T) { took = grantsSplitBy(t, sa, p) })
		if len(took) != 3 || took[2] >= 200*time.Millisecond {
			t.Errorf("plan %d (%s, %+v): held %v after the release", seed, name, p, took)
		}
	}
}
