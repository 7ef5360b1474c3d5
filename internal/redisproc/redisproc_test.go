package redisproc

import (
	"errors"
	"net"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer starts a server on a free port, closed when the test ends;
// without a redis-server binary it skips the test, or fails it under
// CI=true.
func startServer(t *testing.T) *Server {
	t.Helper()
	if _, err := Find(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	s, err := Start(Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestLifecycle(t *testing.T) {
	s := startServer(t)
	if err := Ping(s.Addr); err != nil {
		t.Fatalf("ping after Start: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := Ping(s.Addr); err == nil {
		t.Fatal("a paused server answered PING")
	}
	s.Resume()
	if err := Ping(s.Addr); err != nil {
		t.Fatalf("ping after Resume: %v", err)
	}
	if _, err := s.CPUTime(); err != nil {
		t.Fatalf("CPUTime: %v", err)
	}
	addr := s.Addr
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Addr != addr || !s.Running() {
		t.Fatalf("restarted on %s (running %v), want %s", s.Addr, s.Running(), addr)
	}
	s.Stop()
	if s.Running() || Ping(s.Addr) == nil {
		t.Fatal("server still answers after Stop")
	}
	s.Stop() // a second Stop does nothing
	s.Close()
	if _, err := os.Stat(s.cfg.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the data directory: %v", err)
	}
	if err := s.Pause(); err == nil {
		t.Fatal("Pause of a stopped server succeeded")
	}
}

func TestStartFailsClearly(t *testing.T) {
	_, err := Start(Config{Bin: "/nonexistent/redis-server"})
	if err == nil {
		t.Fatal("started a server from a missing binary")
	}
	t.Setenv("REDIS_SERVER", "/nonexistent/redis-server")
	if _, err := Find(); !errors.Is(err, ErrNoServer) {
		t.Fatalf("Find: got %v, want ErrNoServer", err)
	}
}

// TestStartOnTakenPort: a server that cannot bind its port because
// another server holds it fails to start, and the other server is left
// alone. Before Start checked the process answering, the other server's
// PONG made the failed start look ready (two nodes of one chaos test
// shared an address).
func TestStartOnTakenPort(t *testing.T) {
	a := startServer(t)
	_, port, _ := net.SplitHostPort(a.Addr)
	p, _ := strconv.Atoi(port)
	b, err := Start(Config{Port: p})
	if err == nil {
		b.Close()
		t.Fatalf("started a second server on %s, which the first holds", a.Addr)
	}
	if !errors.Is(err, ErrPortTaken) {
		t.Fatalf("got %v, want ErrPortTaken", err)
	}
	if !a.Running() || Ping(a.Addr) != nil {
		t.Fatal("the first server was disturbed")
	}
	if pid, err := ProcessID(a.Addr); err != nil || pid != a.cmd.Process.Pid {
		t.Fatalf("ProcessID: %d, %v; want %d", pid, err, a.cmd.Process.Pid)
	}
}

// TestFreePortNeverRepeats: ports asked for at once are all different
// (the kernel alone gave two of five callers the same port about once in
// a thousand rounds here).
func TestFreePortNeverRepeats(t *testing.T) {
	const n = 200
	ports := make([]int, n)
	var g errgroup.Group
	for i := range ports {
		g.Go(func() (err error) {
			ports[i], err = FreePort()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	seen := make(map[int]bool, n)
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}
