// Package integration tests redlock against real Redis servers.
//
// The harness starts its own redis-server processes on free loopback ports
// (Debian package redis-server, or REDIS_SERVER=/path/to/redis-server) and
// stops them when each test ends, and again when the test binary exits.
// Without a redis-server binary it uses testcontainers when a Docker engine
// answers. REDLOCK_ADDRS=host:port,… points it at servers you run yourself;
// tests that kill or pause servers are then skipped, and only keys the tests
// create are touched. When no server can be had the tests skip, except under
// CI=true, where they fail: a suite that silently skips proves nothing.
package integration

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopAll()
	if shimDir != "" {
		os.RemoveAll(shimDir)
	}
	if code == 0 {
		// toxiproxy leaves a pipe goroutine blocked on a send when a toxic
		// is removed under live connections: its leak, not ours.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe")); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Node is one Redis server used by a test.
type Node struct {
	Addr string

	// process backend
	proc *redisproc.Server

	// docker backend
	ctr    *tcredis.RedisContainer
	docker *testcontainers.DockerClient
}

var (
	started   []*Node // every process the harness started, for stopAll
	startedMu sync.Mutex
)

// stopAll kills every server process still running.
func stopAll() {
	startedMu.Lock()
	defer startedMu.Unlock()
	for _, n := range started {
		n.stop()
	}
	started = nil
}

type backendKind int

const (
	backendNone backendKind = iota
	backendExternal
	backendProcess
	backendDocker
)

var backendOnce = sync.OnceValues(func() (backendKind, string) {
	if addrs := os.Getenv("REDLOCK_ADDRS"); addrs != "" {
		return backendExternal, addrs
	}
	if path, err := redisproc.Find(); err == nil {
		return backendProcess, path
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if cli, err := testcontainers.NewDockerClientWithOpts(ctx); err == nil {
		cli.Close()
		return backendDocker, ""
	}
	return backendNone, ""
})

// StartNodes gives the test n Redis servers, stopped when the test ends.
func StartNodes(t testing.TB, n int) []*Node {
	t.Helper()
	kind, arg := backendOnce()
	switch kind {
	case backendExternal:
		addrs := strings.Split(arg, ",")
		if len(addrs) < n {
			t.Skipf("REDLOCK_ADDRS names %d servers; this test needs %d", len(addrs), n)
		}
		nodes := make([]*Node, n)
		for i := range nodes {
			nodes[i] = &Node{Addr: strings.TrimSpace(addrs[i])}
		}
		return nodes
	case backendProcess:
		nodes := make([]*Node, n)
		for i := range nodes {
			nodes[i] = startProcess(t, arg, 0)
		}
		return nodes
	case backendDocker:
		nodes := make([]*Node, n)
		for i := range nodes {
			nodes[i] = startContainer(t)
		}
		return nodes
	}
	msg := "no Redis server: install redis-server (make test does, from Debian's packages), set REDIS_SERVER or REDLOCK_ADDRS, or run a Docker engine"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return nil
}

// StartNodesPersistent is StartNodes with every write fsynced to an AOF
// (appendonly yes, appendfsync always): a restarted node forgets nothing.
func StartNodesPersistent(t testing.TB, n int) []*Node {
	t.Helper()
	kind, bin := backendOnce()
	if kind != backendProcess {
		t.Skip("persistent nodes need redis-server processes started by the harness")
	}
	nodes := make([]*Node, n)
	for i := range nodes {
		nodes[i] = startProcess(t, bin, 0, "--appendonly", "yes", "--appendfsync", "always")
	}
	return nodes
}

// clockShim compiles testdata/clockshim.c once per test binary: an
// LD_PRELOAD library that skews a process's clocks (see the file).
var clockShim = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "redlock-clockshim")
	if err != nil {
		return "", err
	}
	shimDir = dir
	so := dir + "/clockshim.so"
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-O2", "-o", so, "testdata/clockshim.c").CombinedOutput(); err != nil {
		return "", fmt.Errorf("gcc: %v\n%s", err, out)
	}
	return so, nil
})

var shimDir string // removed by TestMain

// StartSkewedNodes starts one redis-server per rate, whose clocks run at that
// rate (1 is real time) and offset milliseconds ahead.
func StartSkewedNodes(t testing.TB, rates []float64, offsetsMs []int) []*Node {
	t.Helper()
	kind, bin := backendOnce()
	if kind != backendProcess {
		t.Skip("clock skew needs redis-server processes started by the harness")
	}
	so, err := clockShim()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	nodes := make([]*Node, len(rates))
	for i, r := range rates {
		env := []string{"LD_PRELOAD=" + so, fmt.Sprintf("FAKE_RATE=%g", r), fmt.Sprintf("FAKE_OFFSET_MS=%d", offsetsMs[i])}
		nodes[i] = startProcessIn(t, t.TempDir(), env, bin, 0)
	}
	return nodes
}

func freePort(t testing.TB) int {
	t.Helper()
	p, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startProcess starts redis-server on a loopback port (port, or a free one
// when port is 0), with extra arguments. With persistence (an appendonly
// argument) the data directory is kept for Restart.
func startProcess(t testing.TB, bin string, port int, extra ...string) *Node {
	t.Helper()
	return startProcessIn(t, t.TempDir(), nil, bin, port, extra...)
}

// startProcessIn starts redis-server with its data in dir and env added to
// its environment.
func startProcessIn(t testing.TB, dir string, env []string, bin string, port int, extra ...string) *Node {
	t.Helper()
	proc, err := redisproc.Start(redisproc.Config{Bin: bin, Port: port, Dir: dir, Env: env, Args: extra})
	if err != nil {
		t.Fatalf("redis-server did not start: %v", err)
	}
	n := &Node{Addr: proc.Addr, proc: proc}
	startedMu.Lock()
	started = append(started, n)
	startedMu.Unlock()
	t.Cleanup(n.stop)
	return n
}

// stop kills the server (SIGKILL ends a paused one too) and waits for it.
func (n *Node) stop() {
	switch {
	case n.proc != nil:
		n.proc.Stop()
	case n.ctr != nil:
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = n.ctr.Terminate(ctx)
	}
}

func needsOwnServers(t testing.TB, n *Node) {
	t.Helper()
	if n.proc == nil && n.ctr == nil {
		t.Skip("fault injection needs servers the harness started, not REDLOCK_ADDRS")
	}
}

// Kill stops the server at once, like a crash (SIGKILL).
func (n *Node) Kill(t testing.TB) {
	t.Helper()
	needsOwnServers(t, n)
	n.stop()
}

// Restart kills the server and starts a new one on the same port at once,
// with a new run_id. Without persistence the node forgets every key, as a
// crashed Redis without an AOF does; started by StartNodesPersistent, it
// reloads its AOF.
func (n *Node) Restart(t testing.TB) {
	t.Helper()
	if n.proc == nil {
		t.Skip("restarting needs redis-server processes started by the harness")
	}
	if err := n.proc.Restart(); err != nil {
		t.Fatalf("restart %s: %v", n.Addr, err)
	}
}

// Pause freezes the server (SIGSTOP, or docker pause): it accepts TCP
// connections but answers nothing until Resume.
func (n *Node) Pause(t testing.TB) {
	t.Helper()
	needsOwnServers(t, n)
	if n.ctr != nil {
		if _, err := n.docker.ContainerPause(t.Context(), n.ctr.GetContainerID(), pauseOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := n.proc.Pause(); err != nil {
		t.Fatal(err)
	}
}

// Resume undoes Pause.
func (n *Node) Resume(t testing.TB) {
	t.Helper()
	if n.ctr != nil {
		if _, err := n.docker.ContainerUnpause(context.Background(), n.ctr.GetContainerID(), unpauseOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	n.proc.Resume()
}

// Clients returns one go-redis client per node, closed when the test ends.
// edit, if not nil, adjusts each client's options.
func Clients(t testing.TB, nodes []*Node, edit func(*redis.Options)) []redis.UniversalClient {
	t.Helper()
	clients := make([]redis.UniversalClient, len(nodes))
	for i, n := range nodes {
		opt := &redis.Options{Addr: n.Addr}
		if edit != nil {
			edit(opt)
		}
		c := redis.NewClient(opt)
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients
}

// Admin returns a client for inspecting and preparing one node directly.
func Admin(t testing.TB, n *Node) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// UniqueKey returns a lock key no other test or run uses, and deletes its
// Redis key from every node when the test ends.
func UniqueKey(t testing.TB, nodes []*Node) string {
	t.Helper()
	key := fmt.Sprintf("%s:%s", strings.ReplaceAll(t.Name(), "/", ":"), rand.Text()[:8])
	t.Cleanup(func() {
		for _, n := range nodes {
			c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			c.Del(ctx, RedisKey(key))
			cancel()
			_ = c.Close()
		}
	})
	return key
}

// RedisKey is where the library stores the lock key with its default prefix.
func RedisKey(key string) string { return "redlock:{" + key + "}" }
