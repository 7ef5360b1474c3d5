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
	quits := 0
	for _, q := range s.quits {
		q.mu.Lock()
		quits += q.ended
		q.mu.Unlock()
	}
	admitted, sets := 0, 0 // holdings by a place's ID: let in, or granted by releases
	for _, h := range s.holdings {
		if strings.Contains(h.token, ".ri") || strings.Contains(h.token, ".wi") {
			admitted++
			if len(h.keys) > 1 {
				sets++
			}
		}
	}
	return fmt.Sprintf("%d nodes, %d clients, TTL %v: %d holdings (%d let in or granted by releases, %d of them sets), %d faults, %d attempts during which their Client's calls were ended", len(s.nodes), len(s.clients), s.ttl, len(s.holdings), admitted, sets, len(s.spans), quits)
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

// note records op o, run on node i, in the run's history: the op by
// name, its token, a release's cooldown, the waiter's place (a queue op
// with quiet leaves it), and each of its keys (a set's, all of them) with
// its value and PTTL after it.
func (s *simRun) note(i int, o *wire.Op) {
	f := s.nodes[i]
	var b strings.Builder
	fmt.Fprintf(&b, "%s node %d %s token=%q", s.at(time.Now()), i, opName(o), o.Token)
	if o.Kind == wire.OpRelease && o.TTL > 0 {
		fmt.Fprintf(&b, " cooldown=%v", o.TTL)
	}
	if o.Place != nil && o.Place.ID != "" {
		fmt.Fprintf(&b, " place=%s ticket=%d", o.Place.ID, o.Place.Ticket)
	}
	keys := o.Keys
	if len(keys) == 0 {
		keys = []string{o.Key}
	}
	for _, k := range keys {
		v, _ := f.value(k)
		fmt.Fprintf(&b, " | %s=%q pttl=%v", k, v, f.mem.Do("PTTL", k))
	}
	s.mu.Lock()
	s.hist = append(s.hist, b.String())
	s.mu.Unlock()
}

// opName names o's kind for the history; a queue op that takes the place
// out is a leave.
func opName(o *wire.Op) string {
	n, ok := opNames[o.Kind]
	switch {
	case !ok:
		return fmt.Sprint("op", int(o.Kind))
	case o.Kind == wire.OpQueue && o.Quiet:
		return "leave"
	}
	return n
}

var opNames = map[wire.Kind]string{
	wire.OpAcquire: "acquire", wire.OpExtend: "extend", wire.OpRelease: "release", wire.OpInspect: "inspect",
	wire.OpAcquireFenced: "acquire-fenced", wire.OpFenceWrite: "fence-write", wire.OpQueue: "look",
	wire.OpProclaim: "proclaim", wire.OpAcquirePlain: "acquire-plain", wire.OpAcquireFencedPlain: "acquire-fenced-plain",
}
