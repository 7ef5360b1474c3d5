package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
