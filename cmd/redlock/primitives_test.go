package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// TestExecSemaphore: with --permits 2, two commands run at once under
// permits of one semaphore (with the slot's key in $REDLOCK_KEY), and a
// third is refused; once one ends, the third runs.
func TestExecSemaphore(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	dir := t.TempDir()
	env := []string{"DIR=" + dir}
	script := func(who string) string {
		// Written whole, then renamed: waitFile sees the file only once its
		// content is there (a plain > creates it empty first).
		return fmt.Sprintf(`echo "$REDLOCK_KEY" > "$DIR/%[1]s.tmp" && mv "$DIR/%[1]s.tmp" "$DIR/%[1]s"; while [ ! -e "$DIR/%[1]s.stop" ]; do sleep 0.02; done`, who)
	}
	began := time.Now()
	var cmds []*exec.Cmd
	var outs [][2]*output
	for _, who := range []string{"a", "b"} {
		cmd, stdout, stderr := start(t, env, "exec", "--nodes", nodes, "--permits", "2", "pool", "--", "sh", "-c", script(who))
		waitFile(t, filepath.Join(dir, who), 10*time.Second)
		cmds, outs = append(cmds, cmd), append(outs, [2]*output{stdout, stderr})
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a"))
	b, _ := os.ReadFile(filepath.Join(dir, "b"))
	if !strings.HasPrefix(string(a), "sem:pool:") || !strings.HasPrefix(string(b), "sem:pool:") || string(a) == string(b) {
		t.Fatalf("the commands ran under %q and %q, want two slots of sem:pool", a, b)
	}
	r := runBinary(t, env, "exec", "--nodes", nodes, "--permits", "2", "pool", "--", "true")
	if r.code != exitNotObtained {
		t.Fatalf("a third permit: exit %d, want %d; stderr: %s", r.code, exitNotObtained, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmds[0], outs[0][0], outs[0][1], began, 10*time.Second); r.code != 0 {
		t.Fatalf("a: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runBinary(t, env, "exec", "--nodes", nodes, "--permits", "2", "--wait", "10s", "pool", "--", "true"); r.code != 0 {
		t.Fatalf("the third, once a permit was free: exit %d; stderr: %s", r.code, r.stderr)
	}
	r = runBinary(t, nil, "inspect", "--nodes", nodes, "--permits", "2", "pool")
	if r.code != 0 || !strings.Contains(r.stdout, "sem:pool:0") || !strings.Contains(r.stdout, "sem:pool:1") || !strings.Contains(r.stdout, "1 of 2 permits held") {
		t.Fatalf("inspect --permits 2: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "b.stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, cmds[1], outs[1][0], outs[1][1], began, 10*time.Second); r.code != 0 {
		t.Fatalf("b: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runBinary(t, nil, "exec", "--nodes", nodes, "--permits", "0", "pool", "--", "true"); r.code != 0 {
		t.Fatalf("--permits 0 is the plain lock: exit %d; stderr: %s", r.code, r.stderr)
	}
	if r := runBinary(t, nil, "exec", "--nodes", nodes, "--permits", "999", "pool", "--", "true"); r.code != exitUsage {
		t.Fatalf("--permits 999: exit %d, want %d; stderr: %s", r.code, exitUsage, r.stderr)
	}
}

// TestExecMultiKey: several keys before "--" are locked together, all or
// none: a holder of one of them keeps the command from running, and the
// command sees every key in $REDLOCK_KEY.
func TestExecMultiKey(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	out := filepath.Join(t.TempDir(), "out")
	r := runBinary(t, nil, "exec", "--nodes", nodes, "stock", "ledger", "--", "sh", "-c", `echo "$REDLOCK_KEY" > `+out)
	if r.code != 0 {
		t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
	}
	if b, _ := os.ReadFile(out); strings.TrimSpace(string(b)) != "stock ledger" {
		t.Fatalf("the command saw REDLOCK_KEY=%q, want both keys", b)
	}
	for _, k := range []string{"stock", "ledger"} {
		if n := keyCount(t, servers, k); n != 0 {
			t.Fatalf("%d nodes still hold %s after the command exited", n, k)
		}
	}
	l, err := client(t, servers).Lock(context.Background(), "ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	ran := filepath.Join(t.TempDir(), "ran")
	r = runBinary(t, nil, "exec", "--nodes", nodes, "stock", "ledger", "--", "touch", ran)
	if r.code != exitNotObtained {
		t.Fatalf("exit %d, want %d with ledger held; stderr: %s", r.code, exitNotObtained, r.stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran without every key")
	}
	if n := keyCount(t, servers, "stock"); n != 0 {
		t.Fatalf("%d nodes hold stock after a refused set", n)
	}
	for _, bad := range [][]string{{"a", "a", "--", "true"}, {"--permits", "2", "a", "b", "--", "true"}, {"a", "b", "--"}} {
		r = runBinary(t, nil, append([]string{"exec", "--nodes", nodes}, bad...)...)
		if r.code != exitUsage {
			t.Fatalf("%q: exit %d, want %d; stderr: %s", bad, r.code, exitUsage, r.stderr)
		}
	}
}

// TestExecReadWrite: commands under --read share the read-write lock, a
// --write command waits for them to finish, and inspect shows the readers.
func TestExecReadWrite(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	dir := t.TempDir()
	script := `touch "$DIR/$1"; while [ ! -e "$DIR/stop" ]; do sleep 0.05; done`
	var readers []*exec.Cmd
	var outs, errs []*redisproc.LockedBuffer
	began := time.Now()
	for _, name := range []string{"r1", "r2"} {
		cmd, stdout, stderr := start(t, []string{"DIR=" + dir}, "exec", "--nodes", nodes, "--read", "--wait", "10s", "doc", "--", "sh", "-c", script, "sh", name)
		readers, outs, errs = append(readers, cmd), append(outs, stdout), append(errs, stderr)
	}
	waitFile(t, filepath.Join(dir, "r1"), 10*time.Second)
	waitFile(t, filepath.Join(dir, "r2"), 10*time.Second) // both read at once
	r := runBinary(t, nil, "exec", "--nodes", nodes, "--write", "doc", "--", "true")
	if r.code != exitNotObtained {
		t.Fatalf("--write while two read: exit %d, want %d; stderr: %s", r.code, exitNotObtained, r.stderr)
	}
	// Each reader holds on a majority (its grant on the last node may come
	// later): two majorities of 3 share a node, which shows both.
	r = runBinary(t, nil, "inspect", "--nodes", nodes, "rw:doc")
	if !strings.Contains(r.stdout, "2 readers") || !strings.Contains(r.stdout, "READ: readers hold on") {
		t.Fatalf("inspect does not show the readers:\n%s", r.stdout)
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, cmd := range readers {
		if r := wait(t, cmd, outs[i], errs[i], began, 20*time.Second); r.code != 0 {
			t.Fatalf("reader %d: exit %d; stderr: %s", i, r.code, r.stderr)
		}
	}
	r = runBinary(t, nil, "exec", "--nodes", nodes, "--write", "--wait", "10s", "doc", "--", "true")
	if r.code != 0 {
		t.Fatalf("--write after the readers: exit %d; stderr: %s", r.code, r.stderr)
	}
	for _, bad := range [][]string{{"--read", "--write", "doc", "--", "true"}, {"--read", "a", "b", "--", "true"}, {"--permits", "2", "--write", "a", "--", "true"}} {
		r = runBinary(t, nil, append([]string{"exec", "--nodes", nodes}, bad...)...)
		if r.code != exitUsage {
			t.Fatalf("%q: exit %d, want %d; stderr: %s", bad, r.code, exitUsage, r.stderr)
		}
	}
}
