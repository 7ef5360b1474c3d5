package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestElect: two candidates with commands and a listener. The first leads
// and runs its command (which sees its term); the second waits, and leads
// as soon as the first's command exits (the first resigns); the listener
// prints both leaders in term order and exits 0 on SIGTERM.
func TestElect(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	dir := t.TempDir()
	env := []string{"DIR=" + dir}
	began := time.Now()
	listener, lout, lerr := start(t, env, "elect", "--nodes", nodes, "--listen", "sched")
	script := func(who string) string {
		return fmt.Sprintf(`echo "$REDLOCK_ELECTION $REDLOCK_TERM" > "$DIR/%[1]s"; while [ ! -e "$DIR/%[1]s.stop" ]; do sleep 0.02; done; exit 3`, who)
	}
	first, fout, ferr := start(t, env, "elect", "--nodes", nodes, "sched", "first", "--", "sh", "-c", script("first"))
	waitFile(t, filepath.Join(dir, "first"), 10*time.Second)
	second, sout, serr := start(t, env, "elect", "--nodes", nodes, "sched", "second", "--", "sh", "-c", script("second"))
	waitQueue := func() bool {
		rc := redis.NewClient(&redis.Options{Addr: servers[0].Addr})
		defer rc.Close()
		n, _ := rc.ZCard(context.Background(), "redlock:{election:sched}:queue").Result()
		return n == 1
	}
	for deadline := time.Now().Add(10 * time.Second); !waitQueue(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the second candidate did not queue")
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "second")); err == nil {
		t.Fatal("the second candidate's command ran while the first led")
	}
	if err := os.WriteFile(filepath.Join(dir, "first.stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, first, fout, ferr, began, 10*time.Second); r.code != 3 {
		t.Fatalf("first: exit %d, want the command's 3; stderr: %s", r.code, r.stderr)
	}
	waitFile(t, filepath.Join(dir, "second"), 10*time.Second)
	if err := os.WriteFile(filepath.Join(dir, "second.stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, second, sout, serr, began, 10*time.Second); r.code != 3 {
		t.Fatalf("second: exit %d; stderr: %s", r.code, r.stderr)
	}
	var terms []string
	for _, who := range []string{"first", "second"} {
		b, err := os.ReadFile(filepath.Join(dir, who))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b))
		if len(f) != 2 || f[0] != "sched" {
			t.Fatalf("%s's command saw %q, want the election and a term", who, b)
		}
		terms = append(terms, f[1])
	}
	want := fmt.Sprintf("%s first\n%s second\n", terms[0], terms[1])
	for deadline := time.Now().Add(10 * time.Second); lout.String() != want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	_ = listener.Process.Signal(syscall.SIGTERM)
	r := wait(t, listener, lout, lerr, began, 10*time.Second)
	if r.code != 0 || r.stdout != want {
		t.Fatalf("listener: exit %d, printed %q, want %q; stderr: %s", r.code, r.stdout, want, r.stderr)
	}
	if n := keyCount(t, servers, "election:sched"); n != 0 {
		t.Fatalf("%d nodes still hold the election after both resigned", n)
	}
}

// TestElectLeadUntilSignal: without a command, elect leads until a signal,
// then resigns and exits 0; if the leadership is lost first, it exits
// exitEnded. Bad arguments are usage errors.
func TestElectLeadUntilSignal(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	began := time.Now()
	cmd, stdout, stderr := start(t, nil, "elect", "--nodes", nodes, "solo")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "leading"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not leading; stderr: %s", stderr)
		}
	}
	// A standby stopped while it waits exits 0 and leaves the queue.
	standby, sout, serr := start(t, nil, "elect", "--nodes", nodes, "solo")
	queued := func(n int64) bool {
		for _, s := range servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr})
			got, _ := rc.ZCard(context.Background(), "redlock:{election:solo}:queue").Result()
			_ = rc.Close()
			if got != n {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); !queued(1); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not queue; stderr: %s", serr)
		}
	}
	_ = standby.Process.Signal(syscall.SIGTERM)
	if r := wait(t, standby, sout, serr, began, 10*time.Second); r.code != 0 || !strings.Contains(r.stderr, "standing by") {
		t.Fatalf("standby: exit %d after SIGTERM, want 0; stderr: %s", r.code, r.stderr)
	}
	if !queued(0) {
		t.Fatal("the stopped standby is still queued")
	}

	_ = cmd.Process.Signal(syscall.SIGINT)
	if r := wait(t, cmd, stdout, stderr, began, 10*time.Second); r.code != 0 {
		t.Fatalf("exit %d after SIGINT; stderr: %s", r.code, r.stderr)
	}
	if n := keyCount(t, servers, "election:solo"); n != 0 {
		t.Fatalf("%d nodes still hold the election after the resignation", n)
	}

	cmd, stdout, stderr = start(t, nil, "elect", "--nodes", nodes, "--ttl", "900ms", "solo")
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr.String(), "leading"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not leading; stderr: %s", stderr)
		}
	}
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		if err := rc.Set(context.Background(), "redlock:{election:solo}", "intruder", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_ = rc.Close()
	}
	if r := wait(t, cmd, stdout, stderr, began, 20*time.Second); r.code != exitEnded || !strings.Contains(r.stderr, "taken over") {
		t.Fatalf("exit %d, want %d after a takeover; stderr: %s", r.code, exitEnded, r.stderr)
	}

	for _, args := range [][]string{
		{"elect", "--nodes", nodes},
		{"elect", "--nodes", nodes, "--listen", "solo", "value"},
		{"elect", "--nodes", nodes, "solo", "v", "extra"},
		{"elect", "--nodes", nodes, "solo", "--"},
		{"elect", "--nodes", nodes, "--ttl", "0s", "solo"},
	} {
		if r := runBinary(t, nil, args...); r.code != exitUsage {
			t.Fatalf("%v: exit %d, want %d; stderr: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}
