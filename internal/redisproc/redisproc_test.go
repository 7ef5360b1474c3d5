package redisproc

import (
	"errors"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLifecycle(t *testing.T) {
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
