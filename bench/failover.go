package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// ---- 7: leader election failover ----

// failoverResult is the failover measure: 5 candidate processes (this
// binary re-executed) campaign in one election on 5 nodes; the leader
// resigns, or is SIGKILLed, and the next leader's Campaign returning is
// timed, healthy and with one node SIGSTOPped or killed.
type failoverResult struct {
	TTL, NodeTimeout time.Duration
	Rows             []failoverRow
}

type failoverRow struct {
	Condition string
	// Resign → the next leader's Campaign returning, in the two processes'
	// timestamps (one machine, one wall clock).
	Resigns              int
	ResignP50, ResignP99 time.Duration
	// SIGKILL of the leader → the next leader; and the next leader's start
	// − the killed leadership's last validity end (its own estimate), which
	// must never be negative.
	Kills                        int
	KillP50, KillP99             time.Duration
	AfterValidMin, AfterValidP99 time.Duration
	Early                        int // next leaders before the old validity ended
}

// candidateEnv names the environment variable that makes the bench binary
// a candidate: "addr,addr,…|election|ttl".
const candidateEnv = "REDLOCK_BENCH_CANDIDATE"

// candidateChild is a candidate process. It campaigns, and prints
// "LEAD term validns unixns" when it leads (validns: the leadership's
// validity end), "VALID unixns" with each new validity end of an
// extension, and "RESIGN unixns" once it resigned, with the time just
// before its Resign, which it calls when a line "resign" arrives on stdin;
// then it campaigns again. It runs until killed or stdin closes. A line
// is written once the time it measures is over: the write and the bench
// process it wakes are no part of a hand-off (an acquisition's validity
// goes in its LEAD line, not from the observer inside Campaign).
func candidateChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "candidate: bad spec", spec)
		return 1
	}
	ttl, err := time.ParseDuration(parts[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 1
	}
	clients := readmeClients(strings.Split(parts[0], ","))
	defer closeClients(clients)
	ucs := make([]redis.UniversalClient, len(clients))
	for i, c := range clients {
		ucs[i] = c
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	valid := redlock.Observer(func(e redlock.Event) {
		if e.Err == nil && e.Kind == redlock.EventExtend {
			say("VALID %d", time.Now().Add(e.Validity).UnixNano())
		}
	})
	c, err := redlock.New(ucs, redlock.WithTTL(ttl), redlock.WithObserver(valid))
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 1
	}
	defer c.Close(context.Background())
	e, err := c.Election(parts[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "candidate:", err)
		return 1
	}
	return candidateLoop(e, say)
}

// candidateLoop campaigns, leads until a line on stdin asks it to resign
// (or the leadership is lost), and campaigns again, until stdin closes.
func candidateLoop(e *redlock.Election, say func(format string, args ...any)) int {
	resign := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			resign <- struct{}{}
		}
		close(resign)
	}()
	ctx := context.Background()
	for {
		ld, err := e.Campaign(ctx, strconv.Itoa(os.Getpid()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "candidate:", err)
			return 1
		}
		now := time.Now()
		say("LEAD %d %d %d", ld.Term(), now.Add(ld.Lock().Validity()).UnixNano(), now.UnixNano())
		select {
		case _, ok := <-resign:
			if !ok {
				return 0
			}
			at := time.Now()
			if err := ld.Resign(ctx); err != nil {
				fmt.Fprintln(os.Stderr, "candidate: resign:", err)
			}
			say("RESIGN %d", at.UnixNano())
		case <-ld.Lock().Done():
			fmt.Fprintln(os.Stderr, "candidate: leadership lost:", ld.Lock().Err())
		}
	}
}

// candidate is one candidate process, seen from the bench.
type candidate struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	id    int
}

// candidateEvent is a line a candidate printed.
type candidateEvent struct {
	id   int
	kind string
	at   time.Time // LEAD, RESIGN: when; VALID: the validity's end
	// valid, LEAD: the leadership's validity end (an extension's comes
	// in a VALID line)
	valid time.Time
	term  uint64
}

// election runs candidate processes for one election and collects what
// they print.
type election struct {
	spec   string
	events chan candidateEvent
	procs  map[int]*candidate
	next   int
	valid  map[int]time.Time // each candidate's latest validity end
	leader int               // id of the current leader, −1 none
}

func (el *election) start() error {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), candidateEnv+"="+el.spec)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	id := el.next
	el.next++
	el.procs[id] = &candidate{cmd: cmd, stdin: stdin, id: id}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue
			}
			ev := candidateEvent{id: id, kind: f[0]}
			ns, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
			ev.at = time.Unix(0, ns)
			if f[0] == "LEAD" && len(f) == 4 {
				ev.term, _ = strconv.ParseUint(f[1], 10, 64)
				valid, _ := strconv.ParseInt(f[2], 10, 64)
				ev.valid = time.Unix(0, valid)
			}
			el.events <- ev
		}
		_ = cmd.Wait()
	}()
	return nil
}

func (el *election) stopAll() {
	for _, p := range el.procs {
		_ = p.cmd.Process.Kill()
		_ = p.stdin.Close()
	}
}

// until reads events until done returns true for one (VALID lines are
// recorded and not shown to done), at most 30 s.
func (el *election) until(ctx context.Context, what string, done func(candidateEvent) bool) error {
	limit := time.NewTimer(30 * time.Second)
	defer limit.Stop()
	for {
		select {
		case ev := <-el.events:
			switch ev.kind {
			case "VALID":
				if ev.at.After(el.valid[ev.id]) {
					el.valid[ev.id] = ev.at
				}
				continue
			case "LEAD":
				el.leader = ev.id
				if ev.valid.After(el.valid[ev.id]) {
					el.valid[ev.id] = ev.valid
				}
			}
			if done(ev) {
				return nil
			}
		case <-limit.C:
			return fmt.Errorf("%s: not within 30 s", what)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// leads waits for a candidate other than not to lead, and returns its LEAD.
func (el *election) leads(ctx context.Context, not int) (candidateEvent, error) {
	var n candidateEvent
	err := el.until(ctx, "a new leader", func(ev candidateEvent) bool {
		if ev.kind == "LEAD" && ev.id != not {
			n = ev
		}
		return n.kind != ""
	})
	return n, err
}

// measureFailover runs the failover measure under each condition.
func measureFailover(ctx context.Context, e *env, resigns, kills int) (failoverResult, error) {
	const ttl = time.Second
	res := failoverResult{TTL: ttl, NodeTimeout: ttl / 20}
	nodes := e.nodes[:5]
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	for _, cond := range []string{"healthy", "one node SIGSTOPped", "one node SIGKILLed"} {
		victim := nodes[4]
		switch cond {
		case "one node SIGSTOPped":
			if err := victim.Pause(); err != nil {
				return res, err
			}
		case "one node SIGKILLed":
			victim.Stop()
		}
		row, err := failoverOnce(ctx, strings.Join(addrs, ","), fmt.Sprintf("bench:failover:%d", time.Now().UnixNano()), ttl, resigns, kills)
		switch cond {
		case "one node SIGSTOPped":
			victim.Resume()
		case "one node SIGKILLed":
			if rerr := victim.Restart(); rerr != nil && err == nil {
				err = rerr
			}
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", cond, err)
		}
		row.Condition = cond
		res.Rows = append(res.Rows, row)
		logf("7/8 failover, %s: resign → next p50 %s p99 %s; SIGKILL → next p50 %s p99 %s, after the old validity ≥ %s",
			cond, fmtDur(row.ResignP50), fmtDur(row.ResignP99), fmtDur(row.KillP50), fmtDur(row.KillP99), fmtDur(row.AfterValidMin))
	}
	return res, nil
}

func failoverOnce(ctx context.Context, addrs, name string, ttl time.Duration, resigns, kills int) (failoverRow, error) {
	var row failoverRow
	el := &election{spec: addrs + "|" + name + "|" + ttl.String(), events: make(chan candidateEvent, 1024),
		procs: map[int]*candidate{}, valid: map[int]time.Time{}, leader: -1}
	defer el.stopAll()
	for range 5 {
		if err := el.start(); err != nil {
			return row, err
		}
	}
	if _, err := el.leads(ctx, -1); err != nil {
		return row, err
	}
	time.Sleep(300 * time.Millisecond) // every candidate queued
	gaps, terms, err := el.resignations(ctx, resigns)
	if err != nil {
		return row, err
	}
	s := sorted(gaps)
	row.Resigns, row.ResignP50, row.ResignP99 = len(s), pct(s, 0.5), pct(s, 0.99)
	gaps, after, kterms, err := el.kills(ctx, ttl, kills)
	if err != nil {
		return row, err
	}
	terms = append(terms, kterms...)
	for i := 1; i < len(terms); i++ {
		if terms[i] <= terms[i-1] {
			return row, fmt.Errorf("term %d after term %d", terms[i], terms[i-1])
		}
	}
	for _, a := range after {
		if a < 0 {
			row.Early++
		}
	}
	if len(gaps) > 0 {
		s, a := sorted(gaps), sorted(after)
		row.Kills, row.KillP50, row.KillP99 = len(s), pct(s, 0.5), pct(s, 0.99)
		row.AfterValidMin, row.AfterValidP99 = a[0], pct(a, 0.99)
	}
	return row, nil
}

// resignations has the leader resign n times, and returns the time from
// each Resign to the next leader's Campaign returning, and the terms.
func (el *election) resignations(ctx context.Context, n int) (gaps []time.Duration, terms []uint64, err error) {
	for range n {
		old := el.leader
		if _, err := io.WriteString(el.procs[old].stdin, "resign\n"); err != nil {
			return nil, nil, err
		}
		// The two processes' lines may come in either order.
		var r, next candidateEvent
		err := el.until(ctx, "the resignation and the next leader", func(ev candidateEvent) bool {
			switch {
			case ev.kind == "RESIGN" && ev.id == old:
				r = ev
			case ev.kind == "LEAD" && ev.id != old:
				next = ev
			}
			return r.kind != "" && next.kind != ""
		})
		if err != nil {
			return nil, nil, err
		}
		el.leader = next.id
		gaps = append(gaps, next.at.Sub(r.at))
		terms = append(terms, next.term)
		time.Sleep(5 * time.Millisecond) // the resigner queues again
	}
	return gaps, terms, nil
}

// kills SIGKILLs the leader n times, each at a different point of its
// extension cycle, and starts a new candidate each time. It returns the
// time from each kill to the next leader, the next leader's start minus
// the killed leadership's last validity end, and the terms.
func (el *election) kills(ctx context.Context, ttl time.Duration, n int) (gaps, after []time.Duration, terms []uint64, err error) {
	for k := range n {
		time.Sleep(ttl/3 + time.Duration(k)*ttl/(3*time.Duration(n)))
		old := el.leader
		killed := time.Now()
		if err := el.procs[old].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			return nil, nil, nil, err
		}
		delete(el.procs, old)
		next, err := el.leads(ctx, old)
		if err != nil {
			return nil, nil, nil, err
		}
		gaps = append(gaps, next.at.Sub(killed))
		after = append(after, next.at.Sub(el.valid[old]))
		terms = append(terms, next.term)
		if err := el.start(); err != nil {
			return nil, nil, nil, err
		}
	}
	return gaps, after, terms, nil
}
