package redlock

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// restartGuard is the Redlock spec's "delayed restart" rule, enforced by the
// client: each acquire script also reports its node's run_id when it is not
// among those the Client knows, and for one period after a known node comes
// back with a new run_id, that node's grants do not count towards a majority.
//
// A node is only known once this Client has heard from it: a restart before
// that goes unnoticed. A Redis Cluster node answers with the run_id of the
// shard that owns the key, so several ids are normal there; the guard tracks
// them but does not act on them.
type restartGuard struct {
	period time.Duration
	multi  []bool // per node: a Cluster, with one run_id per shard

	mu    sync.Mutex
	ids   [][]string   // per node: the run_ids heard (the latest, or every shard's)
	until []time.Time  // per node: grants until then do not count
	list  atomic.Value // string: every id heard, joined, for the scripts
}

func newRestartGuard(period time.Duration, multi []bool) *restartGuard {
	g := &restartGuard{period: period, multi: multi,
		ids: make([][]string, len(multi)), until: make([]time.Time, len(multi))}
	g.list.Store(any(","))
	return g
}

// known returns the list of run_ids for the scripts, boxed once; "" (the
// guard off) for a nil guard.
func (g *restartGuard) known() any {
	if g == nil {
		return ""
	}
	return g.list.Load()
}

// check records node i's run_id from an acquire reply and marks a grant
// that must not count.
func (g *restartGuard) check(i int, r result) result {
	now := time.Now()
	g.mu.Lock()
	if id := r.runID; id != "" && !slices.Contains(g.ids[i], id) {
		switch {
		case g.multi[i]:
			g.ids[i] = append(g.ids[i], id)
		case len(g.ids[i]) > 0: // a node we knew is a new process now
			g.ids[i] = []string{id}
			g.until[i] = now.Add(g.period)
		default:
			g.ids[i] = []string{id}
		}
		g.list.Store(any("," + strings.Join(slices.Concat(g.ids...), ",") + ","))
	}
	guarded := now.Before(g.until[i])
	g.mu.Unlock()
	if guarded && (r.status == statusOK || r.status == statusRefreshed) {
		r.guarded = true
	}
	return r
}
