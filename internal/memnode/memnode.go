// Package memnode is an in-memory Redis master for tests: a keyspace of
// strings and sorted sets with expiry, that runs Lua scripts (EVAL and
// EVALSHA, with the script cache and NOSCRIPT) in a Lua 5.1 engine
// (gopher-lua, as miniredis does; Redis runs Lua 5.1), for the commands the
// library's scripts call. It runs the very script strings the library
// sends, so the protocol exists once; a conformance test in integration/
// runs one table of operations against it and against redis-server and
// requires the same replies.
//
// Its clock is time.Now, so inside a testing/synctest bubble keys expire in
// virtual time with the library's timers. Faults a test can inject: a
// clock that runs fast or slow, a restart with or without the keys (a new
// run_id either way), and a flushed script cache. Delays, gates and
// errors belong to the node wrapper of the test that uses it.
package memnode

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Node is one in-memory server. It is safe for concurrent use: commands
// and scripts run one at a time, as on Redis.
type Node struct {
	mu      sync.Mutex
	keys    map[string]*entry
	scripts map[string]*script // by SHA1, hex
	name    string             // memnodeN; the run_id is name-runK after K restarts
	runID   string
	// The clock: the node's time is base + skew + (time.Now − base) × rate.
	base time.Time
	skew time.Duration
	rate float64

	outbox []message // published while a command ran: delivered after it

	subMu   sync.Mutex
	subs    map[int]subscriber
	nextSub int
	runs    atomic.Int64 // restarts, for run_ids
}

type message struct{ channel, payload string }

type subscriber struct {
	channel string
	deliver func(channel, payload string)
}

var ids atomic.Int64

// New returns an empty node with a clock that keeps time.
func New() *Node {
	n := &Node{keys: map[string]*entry{}, scripts: map[string]*script{}, base: time.Now(), rate: 1, subs: map[int]subscriber{}}
	n.name = fmt.Sprintf("memnode%d", ids.Add(1))
	n.runID = n.name + "-run0"
	return n
}

// Do runs one command, as a client sends it (EVALSHA sha numkeys keys…
// args…, EVAL, GET, …; arguments strings or integers), and returns its
// reply as go-redis decodes one: int64, string, nil, []any, or an Error.
// Messages the command published are delivered to subscribers before Do
// returns, outside the node's lock.
func (n *Node) Do(args ...any) reply {
	argv := make([]string, len(args))
	for i, a := range args {
		argv[i] = toArg(a)
	}
	n.mu.Lock()
	r := n.run(argv)
	out := n.outbox
	n.outbox = nil
	n.mu.Unlock()
	for _, m := range out {
		n.deliver(m)
	}
	if s, ok := r.(Status); ok {
		return string(s) // as go-redis decodes a status
	}
	return r
}

// run runs a command or a script; callers hold n.mu.
func (n *Node) run(argv []string) reply {
	if len(argv) > 0 {
		switch upper(argv[0]) {
		case "EVAL":
			return n.eval(argv[1:], false)
		case "EVALSHA":
			return n.eval(argv[1:], true)
		case "INFO":
			return fmt.Sprintf("# Server\r\nredis_version:7.0.0-memnode\r\nrun_id:%s\r\n", n.runID)
		case "PING":
			return Status("PONG")
		case "SCRIPT":
			if len(argv) == 2 && upper(argv[1]) == "FLUSH" {
				n.scripts = map[string]*script{}
				return Status("OK")
			}
			return errSyntax
		}
	}
	return n.command(argv)
}

func upper(s string) string { return strings.ToUpper(s) }

func toArg(a any) string {
	switch a := a.(type) {
	case string:
		return a
	case []byte:
		return string(a)
	case int:
		return strconv.Itoa(a)
	case int64:
		return strconv.FormatInt(a, 10)
	case float64:
		return strconv.FormatFloat(a, 'f', -1, 64)
	case fmt.Stringer:
		return a.String()
	}
	return fmt.Sprint(a)
}

// Keys returns the keys that live on the node now, sorted.
func (n *Node) Keys() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var keys []string
	for k := range n.keys {
		if n.live(k) != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// RunID returns the node's run_id, as INFO server reports it: new after
// every Restart.
func (n *Node) RunID() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runID
}

// Restart makes the node a new process: a new run_id, an empty script
// cache, and, unless keep (persistence), no keys.
func (n *Node) Restart(keep bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.runID = fmt.Sprintf("%s-run%d", n.name, n.runs.Add(1))
	n.scripts = map[string]*script{}
	if !keep {
		n.keys = map[string]*entry{}
	}
}

// SetClockRate makes the node's clock run rate times as fast as time.Now
// from now on (1: true time), as a server whose clock drifts.
func (n *Node) SetClockRate(rate float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	n.base, n.rate = time.Now(), rate
	n.skew = now.Sub(n.base)
}

// now is the node's time; callers hold n.mu.
func (n *Node) now() time.Time {
	real := time.Now()
	if n.rate == 1 && n.skew == 0 {
		return real
	}
	return n.base.Add(n.skew + time.Duration(float64(real.Sub(n.base))*n.rate))
}

func (n *Node) nowMs() int64 { return n.now().UnixMilli() }
func (n *Node) nowUs() int64 { return n.now().UnixMicro() }

// Subscribe delivers the messages published on channel (every channel's
// for "*", as PSUBSCRIBE * does) until the returned stop is called. deliver runs in the goroutine of the command that
// published, after the command, and must not block for long.
func (n *Node) Subscribe(channel string, deliver func(channel, payload string)) (stop func()) {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	id := n.nextSub
	n.nextSub++
	n.subs[id] = subscriber{channel, deliver}
	return func() {
		n.subMu.Lock()
		defer n.subMu.Unlock()
		delete(n.subs, id)
	}
}

func (n *Node) subscribers(channel string) int {
	n.subMu.Lock()
	defer n.subMu.Unlock()
	c := 0
	for _, s := range n.subs {
		if s.channel == channel || s.channel == "*" {
			c++
		}
	}
	return c
}

func (n *Node) deliver(m message) {
	n.subMu.Lock()
	var ds []func(string, string)
	for _, s := range n.subs {
		if s.channel == m.channel || s.channel == "*" {
			ds = append(ds, s.deliver)
		}
	}
	n.subMu.Unlock()
	for _, d := range ds {
		d(m.channel, m.payload)
	}
}
