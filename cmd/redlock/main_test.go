package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/redlock-go/redlock/internal/redistest"
	"go.uber.org/goleak"
)

// These tests drive the built binary, against redis-server processes they
// start on free loopback ports and stop when each test ends.

var binary string // the redlock binary built by TestMain

func TestMain(m *testing.M) {
	redistest.QuietRedisLogs()
	dir, err := os.MkdirTemp("", "redlock-cmd")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "redlock")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code != 0 {
		fmt.Fprint(os.Stderr, redistest.RedisLogTail())
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// startNodes starts n redis-servers for the test and returns their URLs,
// comma-separated, and the servers.
func startNodes(t *testing.T, n int) (string, []*redisproc.Server) {
	t.Helper()
	servers := redistest.Start(t, n)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = "redis://" + s.Addr
	}
	return strings.Join(urls, ","), servers
}

// client returns a redlock Client over the servers, for holding locks the
// binary must contend with.
func client(t *testing.T, servers []*redisproc.Server) *redlock.Client {
	t.Helper()
	var cs []redis.UniversalClient
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		t.Cleanup(func() { _ = rc.Close() })
		cs = append(cs, rc)
	}
	c, err := redlock.New(cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// keyCount is how many servers hold key (with the default prefix).
func keyCount(t *testing.T, servers []*redisproc.Server, key string) int {
	t.Helper()
	n := 0
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		k, err := rc.Exists(context.Background(), "redlock:{"+key+"}").Result()
		_ = rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		n += int(k)
	}
	return n
}

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// output is a process's output, safe to read while the process writes it.
type output = redisproc.LockedBuffer

// start runs the binary with args, and env added to its environment.
func start(t *testing.T, env []string, args ...string) (*exec.Cmd, *output, *output) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr output
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &stdout, &stderr
}

// wait waits for cmd, at most limit, and returns how it ended.
func wait(t *testing.T, cmd *exec.Cmd, stdout, stderr *output, began time.Time, limit time.Duration) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("redlock %v did not end within %v; stderr: %s", cmd.Args[1:], limit, stderr)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode(), time.Since(began)}
}

func runBinary(t *testing.T, env []string, args ...string) result {
	t.Helper()
	began := time.Now()
	cmd, stdout, stderr := start(t, env, args...)
	return wait(t, cmd, stdout, stderr, began, 60*time.Second)
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s did not appear within %v", path, limit)
}

func TestExecRunsCommandUnderLock(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	out := filepath.Join(t.TempDir(), "out")
	script := fmt.Sprintf(`echo "$REDLOCK_KEY $REDLOCK_TOKEN $REDLOCK_FENCE" > %s; exit 7`, out)
	r := runBinary(t, nil, "exec", "--nodes", nodes, "--fencing", "report", "--", "sh", "-c", script)
	if r.code != 7 {
		t.Fatalf("exit %d, want the command's 7; stderr: %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 3 || f[0] != "report" || len(f[1]) < 16 || f[2] == "0" {
		t.Fatalf("the command saw %q, want the key, a token and a fencing token", b)
	}
	if n := keyCount(t, servers, "report"); n != 0 {
		t.Fatalf("%d nodes still hold the key after the command exited", n)
	}
}

func TestExecNodesFromEnvironment(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	r := runBinary(t, []string{"REDLOCK_NODES=" + nodes}, "exec", "envkey", "--", "true")
	if r.code != 0 {
		t.Fatalf("exit %d; stderr: %s", r.code, r.stderr)
	}
}

func TestExecNotObtained(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	l, err := client(t, servers).Lock(context.Background(), "busy", redlock.WithMetadata("someone else"))
	if err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(t.TempDir(), "ran")
	r := runBinary(t, nil, "exec", "--nodes", nodes, "busy", "--", "touch", ran)
	if r.code != exitNotObtained {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitNotObtained, r.stderr)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("the command ran without the lock")
	}
	r = runBinary(t, nil, "exec", "--nodes", nodes, "--wait", "300ms", "busy", "--", "touch", ran)
	if r.code != exitNotObtained || r.took < 300*time.Millisecond {
		t.Fatalf("--wait 300ms: exit %d after %v, want %d after at least 300ms; stderr: %s", r.code, r.took, exitNotObtained, r.stderr)
	}
	// Released while exec waits: it gets the lock and runs the command.
	time.AfterFunc(200*time.Millisecond, func() { _ = l.Unlock(context.Background()) })
	r = runBinary(t, nil, "exec", "--nodes", nodes, "--wait", "10s", "busy", "--", "touch", ran)
	if r.code != 0 {
		t.Fatalf("after the release: exit %d; stderr: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Fatal("the command did not run once the lock was free")
	}
}

// TestExecLockLost: another token takes the key over on every node while
// the command runs. The command gets SIGTERM, and redlock exits with
// exitEnded; a command that ignores SIGTERM is killed after --grace.
func TestExecLockLost(t *testing.T) {
	for _, tc := range []struct {
		name, trap string
		term       bool // the command leaves on SIGTERM, writing $DIR/term
	}{
		{"stops on SIGTERM", `trap 'echo term > "$DIR/term"; exit 0' TERM`, true},
		{"ignores SIGTERM", `trap '' TERM`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, servers := startNodes(t, 3)
			dir := t.TempDir()
			script := tc.trap + `; touch "$DIR/started"; while :; do sleep 0.05; done`
			began := time.Now()
			cmd, stdout, stderr := start(t, []string{"DIR=" + dir}, "exec", "--nodes", nodes, "--ttl", "900ms", "--grace", "300ms", "job", "--", "sh", "-c", script)
			waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
			for _, s := range servers {
				rc := redis.NewClient(&redis.Options{Addr: s.Addr})
				if err := rc.Set(context.Background(), "redlock:{job}", "intruder", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				_ = rc.Close()
			}
			r := wait(t, cmd, stdout, stderr, began, 20*time.Second)
			if r.code != exitEnded {
				t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitEnded, r.stderr)
			}
			if !strings.Contains(r.stderr, "the lock ended") || !strings.Contains(r.stderr, "taken over") {
				t.Fatalf("stderr does not say the lock was taken over: %s", r.stderr)
			}
			if _, err := os.Stat(filepath.Join(dir, "term")); tc.term && err != nil {
				t.Fatal("the command did not get SIGTERM")
			}
		})
	}
}

func TestExecForwardsSignals(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	dir := t.TempDir()
	script := `trap 'echo hup > "$DIR/hup"' HUP; trap 'exit 3' TERM; touch "$DIR/started"; while :; do sleep 0.05; done`
	began := time.Now()
	cmd, stdout, stderr := start(t, []string{"DIR=" + dir}, "exec", "--nodes", nodes, "sig", "--", "sh", "-c", script)
	waitFile(t, filepath.Join(dir, "started"), 10*time.Second)
	_ = cmd.Process.Signal(syscall.SIGHUP)
	waitFile(t, filepath.Join(dir, "hup"), 5*time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	r := wait(t, cmd, stdout, stderr, began, 10*time.Second)
	if r.code != 3 {
		t.Fatalf("exit %d, want the command's 3 after its TERM trap; stderr: %s", r.code, r.stderr)
	}
	if n := keyCount(t, servers, "sig"); n != 0 {
		t.Fatalf("%d nodes still hold the key", n)
	}
}

func TestExecUnreachable(t *testing.T) {
	var urls []string
	for range 3 {
		p, err := redisproc.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, fmt.Sprintf("redis://127.0.0.1:%d", p))
	}
	r := runBinary(t, nil, "exec", "--nodes", strings.Join(urls, ","), "k", "--", "true")
	if r.code != exitUnreachable {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitUnreachable, r.stderr)
	}
}

// TestExecHeldWithNodeDown: one node of three is down and the key is held
// on the other two. The answer is "held elsewhere", not "unreachable", even
// though the attempt stops before every node has answered.
func TestExecHeldWithNodeDown(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	if _, err := client(t, servers).Lock(context.Background(), "held"); err != nil {
		t.Fatal(err)
	}
	servers[2].Stop()
	for range 5 {
		r := runBinary(t, nil, "exec", "--nodes", nodes, "held", "--", "true")
		if r.code != exitNotObtained {
			t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitNotObtained, r.stderr)
		}
	}
}

func TestExecCommandNotFound(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	r := runBinary(t, nil, "exec", "--nodes", nodes, "nf", "--", "/nonexistent/command")
	if r.code != exitNotFound {
		t.Fatalf("exit %d, want %d; stderr: %s", r.code, exitNotFound, r.stderr)
	}
	if n := keyCount(t, servers, "nf"); n != 0 {
		t.Fatalf("%d nodes still hold the key", n)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{nil, exitUsage, "Usage:"},
		{[]string{"help"}, 0, "Exit statuses"},
		{[]string{"frobnicate"}, exitUsage, "unknown command"},
		{[]string{"exec", "--help"}, 0, "Usage: redlock exec"},
		{[]string{"exec"}, exitUsage, "missing KEY"},
		{[]string{"exec", "k"}, exitUsage, "missing COMMAND"},
		{[]string{"exec", "--wait", "soon", "k", "--", "true"}, exitUsage, "invalid value"},
		{[]string{"exec", "--nodes", "bad://x", "k", "--", "true"}, exitUsage, "invalid URL scheme"},
		{[]string{"exec", "--nodes", "redis://u:secret@127.0.0.1:1,:x", "k", "--", "true"}, exitUsage, "node"},
		{[]string{"exec", "--nodes", "127.0.0.1:1,127.0.0.1:2", "k", "--", "true"}, exitUsage, "at least 3"},
		{[]string{"exec", "--nodes", "127.0.0.1:1", "--ttl", "-1s", "k", "--", "true"}, exitUsage, "--ttl -1s"},
		{[]string{"inspect"}, exitUsage, "exactly one KEY"},
		{[]string{"demo", "--duration", "1s"}, exitUsage, "too short"},
		{[]string{"demo", "--node-count", "2"}, exitUsage, "3 to 9"},
	} {
		r := runBinary(t, []string{"REDLOCK_NODES="}, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("redlock %q: exit %d, want %d and %q; output:\n%s%s", tc.args, r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
		if strings.Contains(r.stderr, "secret") {
			t.Errorf("redlock %q printed the password: %s", tc.args, r.stderr)
		}
		if tc.code == exitUsage && tc.args != nil && tc.want != "invalid value" && strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("redlock %q: want a one-line error, got:\n%s", tc.args, r.stderr)
		}
	}
}

func TestInspect(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	c := client(t, servers)
	l, err := c.Lock(context.Background(), "inspected", redlock.WithMetadata("batch 42"), redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	// Lock returns at a majority: the last node's grant may still be on
	// its way (CI run 30, beside a CPU hog, listed it free).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, err := c.Inspect(context.Background(), "inspected")
		if err == nil && !slices.ContainsFunc(s.Nodes, func(n redlock.NodeState) bool { return !n.Held }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lock's key did not reach every node: %v", err)
		}
	}
	r := runBinary(t, nil, "inspect", "--nodes", nodes, "inspected")
	if r.code != 0 || !strings.Contains(r.stdout, "HELD by a majority") || strings.Count(r.stdout, "batch 42") != 4 {
		t.Fatalf("exit %d; output:\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, nil, "inspect", "--nodes", nodes, "--json", "inspected")
	var rep inspectReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json: %v\n%s", err, r.stdout)
	}
	s, err := c.Inspect(context.Background(), "inspected")
	if err != nil {
		t.Fatal(err)
	}
	holder, _, _ := s.Holder()
	if strings.Contains(r.stdout, l.Token()) {
		t.Fatalf("--json shows the holder's token:\n%s", r.stdout)
	}
	if !rep.Held || rep.Holder != holder || rep.Metadata != "batch 42" || rep.Quorum != 2 || len(rep.Nodes) != 3 ||
		rep.RemainingMs <= 0 || rep.Nodes[0].Fence == 0 || rep.Nodes[0].PTTLMs <= 0 || rep.Nodes[0].Waiting != 0 {
		t.Fatalf("--json: %+v", rep)
	}
	// A Lock call waiting in the key's queue shows on every node.
	wctx, wcancel := context.WithCancel(context.Background())
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		_, _ = client(t, servers).Lock(wctx, "inspected")
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r = runBinary(t, nil, "inspect", "--nodes", nodes, "--json", "inspected")
		rep = inspectReport{}
		_ = json.Unmarshal([]byte(r.stdout), &rep)
		if len(rep.Nodes) == 3 && rep.Nodes[0].Waiting == 1 && rep.Nodes[1].Waiting == 1 && rep.Nodes[2].Waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--json does not show the waiter on every node: %s", r.stdout)
		}
	}
	if first := rep.Nodes[0].First; first == "" || !strings.Contains(first, ".") {
		t.Fatalf("first waiter %q, want a waiter ID", first)
	}
	r = runBinary(t, nil, "inspect", "--nodes", nodes, "inspected")
	if !strings.Contains(r.stdout, "WAITING") || !strings.Contains(r.stdout, "1 (first "+rep.Nodes[0].First+")") {
		t.Fatalf("the table does not show the waiter:\n%s", r.stdout)
	}
	wcancel()
	<-waited
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	servers[2].Stop()
	r = runBinary(t, nil, "inspect", "--nodes", nodes, "inspected")
	if r.code != 0 || !strings.Contains(r.stdout, "FREE") || !strings.Contains(r.stdout, servers[2].Addr+": dial tcp") {
		t.Fatalf("after the release, one node down: exit %d; output:\n%s%s", r.code, r.stdout, r.stderr)
	}
	servers[1].Stop()
	r = runBinary(t, nil, "inspect", "--nodes", nodes, "inspected")
	if r.code != exitUnreachable || !strings.Contains(r.stdout, "UNKNOWN") {
		t.Fatalf("two of three nodes down: exit %d, want %d; output:\n%s%s", r.code, exitUnreachable, r.stdout, r.stderr)
	}
}

func TestDemo(t *testing.T) {
	for _, mode := range []string{"--embedded", "--redis-server"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "--redis-server" {
				startNodes(t, 0) // skips, or fails under CI, without redis-server
			}
			r := runBinary(t, nil, "demo", mode, "--duration", "4s")
			if r.code != 0 {
				t.Fatalf("exit %d; output:\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, want := range []string{"violations        0", "no majority", "restored", "Summary"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("output lacks %q:\n%s", want, r.stdout)
				}
			}
			if strings.Contains(r.stdout, "acquisitions      0 ") {
				t.Errorf("no acquisitions:\n%s", r.stdout)
			}
		})
	}
}

// TestExecUnusable: when a majority of nodes fail in a way waiting cannot
// cure (here the lock's key holds a hash on two nodes of three), exec stops
// at once, even with a long --wait, with exitConfig and what to change.
func TestExecUnusable(t *testing.T) {
	nodes, servers := startNodes(t, 3)
	for _, s := range servers[:2] {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		if err := rc.HSet(context.Background(), "redlock:{hashed}", "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		_ = rc.Close()
	}
	r := runBinary(t, nil, "exec", "--nodes", nodes, "--wait", "1h", "hashed", "--", "true")
	if r.code != exitConfig || !strings.Contains(r.stderr, "WRONGTYPE") || !strings.Contains(r.stderr, "WithKeyPrefix") {
		t.Fatalf("exit %d, want %d naming WRONGTYPE and the cure; stderr: %s", r.code, exitConfig, r.stderr)
	}
}

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
