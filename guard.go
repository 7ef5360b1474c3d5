package redlock

import (
	"sync"
	"sync/atomic"
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
	mu     sync.Mutex                   // serialises the changes of nodes
	nodes  []atomic.Pointer[guardState] // per node; read without mu: every acquire reply is checked
}

// guardState is what the guard knows of one node; replaced whole, never
// changed.
type guardState struct {
	id    string    // the run_id heard last
	until time.Time // grants until then do not count; zero: never
}

func newRestartGuard(period time.Duration, n int) *restartGuard {
	g := &restartGuard{period: period, nodes: make([]atomic.Pointer[guardState], n)}
	for i := range g.nodes {
		g.nodes[i].Store(&guardState{})
	}
	return g
}

// learn records node i's run_id, heard from a look (see
// handoff.heardProcess).
func (g *restartGuard) learn(i int, id string) { g.note(i, id) }

// note records node i's run_id id, and returns what the guard knows of
// the node since. A node we knew that answers with another id is a new
// process: its grants do not count for a period from now.
func (g *restartGuard) note(i int, id string) *guardState {
	if st := g.nodes[i].Load(); id == "" || id == st.id {
		return st
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.nodes[i].Load()
	if id == st.id {
		return st
	}
	next := &guardState{id: id, until: st.until}
	if st.id != "" {
		next.until = time.Now().Add(g.period)
	}
	g.nodes[i].Store(next)
	return next
}

// refusing reports whether node i's grants do not count now.
func (g *restartGuard) refusing(i int) bool { return g.nodes[i].Load().refusing() }

// refusing reports whether grants do not count now.
func (st *guardState) refusing() bool { return !st.until.IsZero() && time.Now().Before(st.until) }

// check records node i's run_id from an acquire result and marks a grant
// that must not count.
func (g *restartGuard) check(i int, r wire.Result) wire.Result {
	st := g.note(i, r.RunID) // a refusal's run_id too
	if (r.Status == wire.StatusOK || r.Status == wire.StatusRefreshed) && st.refusing() {
		r.Guarded = true
	}
	return r
}
