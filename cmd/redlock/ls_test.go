package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// lsJSON runs `redlock ls --json` with args and decodes its report.
func lsJSON(t *testing.T, args ...string) (lsReport, result) {
	t.Helper()
	r := runBinary(t, nil, append([]string{"ls", "--json"}, args...)...)
	var rep lsReport
	if r.code == 0 {
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("%v: %s", err, r.stdout)
		}
	}
	return rep, r
}

func rowNamed(t *testing.T, rep lsReport, name string) lsRow {
	t.Helper()
	for _, r := range rep.Locks {
		if r.Name == name {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", name, rep.Locks)
	return lsRow{}
}

// must returns a function that returns v, failing t on err:
// must[T](t)(f()).
func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestLs: every kind of lock shows as one row with the majority's verdict:
// a mutex (with a waiter queued), a multi-key set, a read-write lock held
// by a reader, a semaphore's slots folded into one row, an election with
// its leader's term and value; a pattern narrows the listing; a free key
// whose queue is all that is left shows as free.
func TestLs(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	c := client(t, servers)
	ctx := context.Background()
	jobs := must[*redlock.Lock](t)(c.Lock(ctx, "jobs", redlock.WithMetadata("nightly")))
	defer jobs.Unlock(ctx)
	wctx, cancelWaiter := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() { _, err := c.Lock(wctx, "jobs"); waited <- err }()
	var once sync.Once
	stopWaiting := func() { once.Do(func() { cancelWaiter(); <-waited }) }
	defer stopWaiting()
	set := must[*redlock.Lock](t)(must[*redlock.MultiLock](t)(c.MultiLock([]string{"a", "b"})).Lock(ctx))
	defer set.Unlock(ctx)
	reader := must[*redlock.Lock](t)(must[*redlock.RWMutex](t)(c.RWMutex("cfg")).RLock(ctx))
	defer reader.Unlock(ctx)
	sem := must[*redlock.Semaphore](t)(c.Semaphore("pool", 3))
	for range 2 {
		p := must[*redlock.Lock](t)(sem.Acquire(ctx))
		defer p.Unlock(ctx)
	}
	e := must[*redlock.Election](t)(c.Election("sched"))
	ld := must[*redlock.Leadership](t)(e.Campaign(ctx, "leader-1"))
	defer ld.Resign(ctx)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		rep, _ := lsJSON(t, "--nodes", nodes, "jobs")
		if len(rep.Locks) == 1 && rep.Locks[0].Waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the waiter never showed: %+v", rep)
		}
	}

	rep, r := lsJSON(t, "--nodes", nodes)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := len(rep.Locks); got != 5 {
		t.Fatalf("%d rows, want 5: %+v", got, rep.Locks)
	}
	for _, want := range []struct{ name, kind, holder string }{
		{"jobs", "mutex", ""}, {"a,b", "multi-key", ""}, {"cfg", "rwmutex", "1 readers"},
		{"pool", "semaphore", "2 held"}, {"sched", "election", ""},
	} {
		row := rowNamed(t, rep, want.name)
		if row.Kind != want.kind || row.Verdict != verdictHeld || row.Answered != 3 || row.Holder == "" || want.holder != "" && row.Holder != want.holder {
			t.Fatalf("%s: %+v, want a %s held by a majority (holder %q)", want.name, row, want.kind, want.holder)
		}
	}
	if row := rowNamed(t, rep, "jobs"); row.Metadata != "nightly" || row.Waiting != 1 || row.RemainingMs <= 0 {
		t.Fatalf("jobs: %+v", row)
	}
	if row := rowNamed(t, rep, "sched"); row.Term != ld.Term() || row.Metadata != "leader-1" {
		t.Fatalf("sched: %+v, want term %d and the leader's value", row, ld.Term())
	}
	if rep, _ := lsJSON(t, "--nodes", nodes, "sem:*"); len(rep.Locks) != 1 || rep.Locks[0].Name != "pool" {
		t.Fatalf("pattern sem:*: %+v", rep.Locks)
	}

	stopWaiting()
	if err := jobs.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The key is gone; its queue may linger until the waiter's place
	// lapses: the lock is listed, free.
	if rep, _ := lsJSON(t, "--nodes", nodes, "jobs"); len(rep.Locks) == 1 && rep.Locks[0].Verdict != verdictFree {
		t.Fatalf("released: %+v", rep.Locks)
	}
	r = runBinary(t, nil, "ls", "--nodes", nodes)
	if r.code != 0 || !strings.Contains(r.stdout, "KIND") || !strings.Contains(r.stdout, "election") {
		t.Fatalf("table: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{
		{"ls", "--nodes", nodes, "a*", "b*"},
		{"ls", "--nodes", nodes, "--limit", "-1"},
		{"ls", "--nodes", nodes, "{x}"},
	} {
		if r := runBinary(t, nil, args...); r.code != exitUsage {
			t.Fatalf("%v: exit %d, want %d; stderr: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}

// TestLsFrozenNodes: with one of 3 nodes frozen (SIGSTOP) the verdicts
// still stand on the other two; with two frozen they are unknown. Either
// way ls returns (each node's scan and inspection are bounded), exit 0,
// naming the nodes it could not read.
func TestLsFrozenNodes(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	c := client(t, servers)
	l := must[*redlock.Lock](t)(c.Lock(context.Background(), "frozen"))
	defer l.Unlock(context.Background())
	for i, want := range []string{verdictHeld, verdictUnknown} {
		if err := servers[2-i].Pause(); err != nil {
			t.Fatal(err)
		}
		defer servers[2-i].Resume()
		rep, r := lsJSON(t, "--nodes", nodes)
		if r.code != 0 || !strings.Contains(r.stderr, servers[2-i].Addr) {
			t.Fatalf("%d frozen: exit %d; stderr: %s", i+1, r.code, r.stderr)
		}
		if row := rowNamed(t, rep, "frozen"); row.Verdict != want || row.Answered != 2-i {
			t.Fatalf("%d frozen: %+v, want %s", i+1, row, want)
		}
	}
}

// TestLsLargeKeyspace: a node with a million unrelated keys, and 1,500
// locks on every node: ls finds every lock with --limit 0, and the
// default limit of 1,000 says it stopped there.
func TestLsLargeKeyspace(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	ctx := context.Background()
	const locks = 1500
	for i, s := range servers {
		// No timeouts: the setup writes some 30 MB, and a loaded machine
		// (CI beside a CPU hog) took longer than go-redis's default 3 s
		// write timeout for one pipeline of all of it (CI run 54). Batches
		// of 100,000 keys keep each pipeline small.
		rc := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: -1, WriteTimeout: -1})
		defer rc.Close()
		pipe := rc.Pipeline()
		for j := range locks {
			pipe.Set(ctx, fmt.Sprintf("redlock:{big:%d}", j), fmt.Sprintf("token%d", j), time.Hour)
		}
		batches := 0 // of 1,000 keys: the million on node 0 only
		if i == 0 {
			batches = 1000
		}
		for j := range batches {
			args := make([]any, 0, 2000)
			for k := range 1000 {
				args = append(args, fmt.Sprintf("user:%d:%d", j, k), "x")
			}
			pipe.MSet(ctx, args...)
			if j%100 == 99 {
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rep, r := lsJSON(t, "--nodes", nodes, "--limit", "0")
	if r.code != 0 || len(rep.Locks) != locks || rep.Truncated {
		t.Fatalf("--limit 0: exit %d, %d rows (want %d), truncated %v; stderr: %s", r.code, len(rep.Locks), locks, rep.Truncated, r.stderr)
	}
	for _, row := range rep.Locks {
		if row.Verdict != verdictHeld {
			t.Fatalf("%+v: want held", row)
		}
	}
	rep, r = lsJSON(t, "--nodes", nodes)
	if r.code != 0 || len(rep.Locks) != 1000 || !rep.Truncated {
		t.Fatalf("default limit: exit %d, %d rows, truncated %v", r.code, len(rep.Locks), rep.Truncated)
	}
}

// TestLsWatch: --watch redraws until interrupted, then exits 0.
func TestLsWatch(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	began := time.Now()
	cmd, stdout, stderr := start(t, nil, "ls", "--nodes", nodes, "--watch")
	for deadline := time.Now().Add(10 * time.Second); strings.Count(stdout.String(), "redlock ls *") < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than two frames: %q; stderr: %s", stdout, stderr)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	if r := wait(t, cmd, stdout, stderr, began, 10*time.Second); r.code != 0 {
		t.Fatalf("exit %d after SIGINT; stderr: %s", r.code, r.stderr)
	}
}
