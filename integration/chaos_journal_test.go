package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// A journal is a chaos run's record of what happened when: every event
// its Clients' observers report (named by the worker whose call it was),
// every fault, and every change a node reader saw on a node. A run that
// finds a violation prints the part of it around the violation, so that a
// failure that comes once in many runs can be read from its own log.
type journal struct {
	mu      sync.Mutex
	entries []journalEntry
	nodes   map[string]string // the last state read of each node
}

type journalEntry struct {
	at   time.Time
	what string
}

// workerKey is the context key of the worker name a journal's observer
// reports events under.
type workerKey struct{}

// withWorker returns ctx naming worker, for the journal.
func withWorker(ctx context.Context, worker string) context.Context {
	return context.WithValue(ctx, workerKey{}, worker)
}

func (j *journal) add(format string, args ...any) {
	e := journalEntry{at: time.Now(), what: fmt.Sprintf(format, args...)}
	j.mu.Lock()
	j.entries = append(j.entries, e)
	j.mu.Unlock()
}

// observer returns an Observer that journals client's events.
func (j *journal) observer(client string) redlock.Observer {
	return func(e redlock.Event) {
		who, _ := e.Context.Value(workerKey{}).(string)
		if who == "" {
			who = client + " (background)"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s", who, e.Kind)
		if e.Read {
			b.WriteString(" read")
		}
		if e.Attempt > 0 {
			fmt.Fprintf(&b, " #%d", e.Attempt)
		}
		if e.LetIn {
			b.WriteString(" let-in")
		}
		if e.HandedOver {
			b.WriteString(" handed-over")
		}
		fmt.Fprintf(&b, " took %v", e.Duration.Round(time.Microsecond))
		if e.Err != nil {
			fmt.Fprintf(&b, " err=%q", strings.TrimPrefix(e.Err.Error(), "redlock: "))
		} else if e.Validity > 0 {
			fmt.Fprintf(&b, " valid %v", e.Validity.Round(time.Microsecond))
		}
		for _, n := range e.Nodes {
			port := n.Node[strings.LastIndexByte(n.Node, ':')+1:]
			if n.Err == nil {
				fmt.Fprintf(&b, " [%s ok %v]", port, n.Latency.Round(time.Microsecond))
			} else {
				fmt.Fprintf(&b, " [%s %s]", port, strings.TrimPrefix(n.Err.Error(), "redlock: "))
			}
		}
		j.add("%s", b.String())
	}
}

// nodeState journals node's state read, where it changed since the last.
func (j *journal) nodeState(node, state string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.nodes == nil {
		j.nodes = map[string]string{}
	}
	if j.nodes[node] == state {
		return
	}
	j.nodes[node] = state
	j.entries = append(j.entries, journalEntry{at: time.Now(), what: "node " + node + ": " + state})
}

// report logs the journal's entries from from to to, or, with
// REDLOCK_JOURNAL set, writes the whole journal to that file instead.
func (j *journal) report(t *testing.T, from, to time.Time) {
	t.Helper()
	j.mu.Lock()
	es := append([]journalEntry(nil), j.entries...)
	j.mu.Unlock()
	sort.SliceStable(es, func(a, b int) bool { return es[a].at.Before(es[b].at) })
	var b strings.Builder
	path := os.Getenv("REDLOCK_JOURNAL")
	for _, e := range es {
		if path == "" && (e.at.Before(from) || e.at.After(to)) {
			continue
		}
		fmt.Fprintf(&b, "%s %s\n", e.at.Format("15:04:05.000000"), e.what)
	}
	if path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("the run's journal is in %s", path)
		return
	}
	t.Logf("the journal from %s to %s:\n%s", from.Format("15:04:05.000000"), to.Format("15:04:05.000000"), b.String())
}

// rwNodeState is one atomic read of a read-write lock's state on a node:
// {1 if a writer's key is there (a reservation is not a writer's), the
// live readers, the key's value and PTTL, each live reader and its lease
// left (ms)}.
var rwNodeState = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local v = redis.call('GET', KEYS[1])
local writer = 0
if v and string.byte(v) ~= 0 then writer = 1 end
local rs = redis.call('ZRANGEBYSCORE', KEYS[1] .. ':readers', '(' .. now, '+inf', 'WITHSCORES')
local live = {}
for i = 1, #rs, 2 do live[#live + 1] = rs[i] .. '@' .. string.format('%d', tonumber(rs[i + 1]) - now) end
return {writer, #rs / 2, v and string.gsub(v, '%z', '|') or '', redis.call('PTTL', KEYS[1]), table.concat(live, ' ')}
`)

// readRWNode reads key's state on a node, journals it, and returns the
// violation it shows (a writer's key beside a live reader), if any.
func (j *journal) readRWNode(ctx context.Context, admin *redis.Client, n *Node, key string) ([]string, bool) {
	st, err := rwNodeState.Run(ctx, admin, []string{key}).Slice()
	if err != nil || len(st) != 5 {
		return nil, false
	}
	writer, _ := st[0].(int64)
	live, _ := st[1].(int64)
	j.nodeState(n.Addr, fmt.Sprintf("value %q pttl %v readers [%v]", st[2], st[3], st[4]))
	if writer == 1 && live > 0 {
		return []string{fmt.Sprintf("%s: a writer's key and %d live readers", n.Addr, live)}, true
	}
	return nil, true
}

// violationSpan returns the span of the first two holdings that
// overlap, a writer's with a reader's or another writer's (the whole of
// the holdings where none do: a token out of order, say).
func violationSpan(readers, writers []holding) (from, to time.Time) {
	all := append(append([]holding(nil), writers...), readers...)
	for i, w := range writers {
		for _, o := range all[i+1:] {
			if o.from.Before(w.to) && w.from.Before(o.to) {
				return earlier(w.from, o.from), later(w.to, o.to)
			}
		}
	}
	for _, h := range all {
		if from.IsZero() || h.from.Before(from) {
			from = h.from
		}
		to = later(to, h.to)
	}
	return from, to
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
