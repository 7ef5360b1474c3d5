package redlock

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// What a run tells: its log (with -sim.seed, every round), a summary,
// and with -sim.history every op the nodes ran.

func (s *simRun) logf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, fmt.Sprintf("%8.3fs ", time.Since(s.begin).Seconds())+fmt.Sprintf(format, args...))
}

func (s *simRun) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d nodes, %d clients, TTL %v: %d holdings, %d faults", len(s.nodes), len(s.clients), s.ttl, len(s.holdings), len(s.spans))
}

// around returns the run's log around the first violation's time.
func (s *simRun) around(v []string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.log) <= 60 || *simSeed != 0 || *simTrace {
		return strings.Join(s.log, "\n")
	}
	return strings.Join(s.log[len(s.log)-60:], "\n") + "\n(the last 60 of " + fmt.Sprint(len(s.log)) + " lines; -sim.seed shows all)"
}

// simHistory keeps, and prints for a failing seed, every op each node
// ran with its key's value and PTTL after it: the way to read a failure
// that no seed reproduces (tokens come from crypto/rand).
var simHistory = flag.Bool("sim.history", false, "print every op the nodes ran for a failing seed")

// note records op o, run on node i, in the run's history.
func (s *simRun) note(i int, o *wire.Op) {
	f := s.nodes[i]
	who := ""
	if o.Place != nil {
		who = fmt.Sprintf(" place=%s ticket=%d", o.Place.ID, o.Place.Ticket)
	}
	v, _ := f.value(o.Key)
	line := fmt.Sprintf("%s node %d %v key=%s token=%q quiet=%v%s -> value=%q pttl=%v", s.at(time.Now()), i, o.Kind, o.Key, o.Token, o.Quiet, who, v, f.mem.Do("PTTL", o.Key))
	s.mu.Lock()
	s.hist = append(s.hist, line)
	s.mu.Unlock()
}
