package redlock

import (
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// restartGuard is the Redlock spec's "delayed restart" rule, enforced by the
// client: for one period after a known node comes back as a new process
// (its run_id changed), that node's grants do not count towards a majority.
//
// The run_id comes with every acquire result of a standalone or Sentinel
// node: each node's stream asks INFO server once per connection, before the
// first acquire it sends on it (stream.prepare, in internal/nodeio). A server that restarts
// closes every connection, so a connection's run_id cannot go stale: a
// restarted node is seen at the first acquire after it, on a fresh
// connection. A node is only known once this Client has heard from it: a
// restart before that goes unnoticed. A Redis Cluster node reports no
// run_id (its shards have their own, and one connection does not reach
// them all), so it is not guarded.
type restartGuard struct {
	period time.Duration

	mu    sync.Mutex
	ids   []string    // per node: the run_id heard last
	until []time.Time // per node: grants until then do not count
}

func newRestartGuard(period time.Duration, n int) *restartGuard {
	return &restartGuard{period: period, ids: make([]string, n), until: make([]time.Time, n)}
}

// learn records node i's run_id, heard from a look (see
// handoff.heardProcess).
func (g *restartGuard) learn(i int, id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.note(i, id, time.Now())
}

// note records node i's run_id id, heard at now; callers hold g.mu.
func (g *restartGuard) note(i int, id string, now time.Time) {
	if id != "" && id != g.ids[i] {
		if g.ids[i] != "" { // a node we knew is a new process now
			g.until[i] = now.Add(g.period)
		}
		g.ids[i] = id
	}
}

// refusing reports whether node i's grants do not count now.
func (g *restartGuard) refusing(i int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return time.Now().Before(g.until[i])
}

// check records node i's run_id from an acquire result and marks a grant
// that must not count.
func (g *restartGuard) check(i int, r wire.Result) wire.Result {
	now := time.Now()
	g.mu.Lock()
	g.note(i, r.RunID, now)
	guarded := now.Before(g.until[i])
	g.mu.Unlock()
	if guarded && (r.Status == wire.StatusOK || r.Status == wire.StatusRefreshed) {
		r.Guarded = true
	}
	return r
}
