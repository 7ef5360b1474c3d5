package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// get asks url and returns the status and the body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHealthStatus: the endpoint answers 200 while standing by and while
// leading with the lease renewed; 503 when the leader's validity is below
// the margin, and once the leadership has ended (taken over).
func TestHealthStatus(t *testing.T) {
	_, servers := startNodes(t, 3)
	c := client(t, servers)
	e, err := c.Election("health")
	if err != nil {
		t.Fatal(err)
	}
	h := &health{margin: healthMargin(10 * time.Second)}
	addr, stop, err := serveHealth("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	url := "http://" + addr + "/healthz"
	if code, body := get(t, url); code != http.StatusOK || !strings.Contains(body, "standing by") {
		t.Fatalf("standing by: %d %q", code, body)
	}
	ld, err := e.Campaign(context.Background(), "v")
	if err != nil {
		t.Fatal(err)
	}
	h.leading(ld)
	if code, body := get(t, url); code != http.StatusOK || !strings.Contains(body, "leading") {
		t.Fatalf("leading: %d %q", code, body)
	}
	// A margin above any validity: the leader counts as not renewed.
	setMargin := func(d time.Duration) { h.mu.Lock(); h.margin = d; h.mu.Unlock() }
	setMargin(time.Hour)
	if code, body := get(t, url); code != http.StatusServiceUnavailable || !strings.Contains(body, "not renewed") {
		t.Fatalf("below the margin: %d %q", code, body)
	}
	setMargin(healthMargin(10 * time.Second))
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr})
		if err := rc.Set(context.Background(), "redlock:{election:health}", "intruder", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		_ = rc.Close()
	}
	// The next extension finds the key taken over and ends the lock;
	// extending it at once gets there without waiting for the timer.
	_ = ld.Lock().Extend(context.Background(), 10*time.Second)
	<-ld.Lock().Done()
	if code, body := get(t, url); code != http.StatusServiceUnavailable || !strings.Contains(body, "ended") {
		t.Fatalf("after a takeover: %d %q", code, body)
	}
	if code, _ := get(t, "http://"+addr+"/other"); code != http.StatusNotFound {
		t.Fatalf("another path: %d, want 404", code)
	}
}

// healthURL waits for elect's line naming its health endpoint.
func healthURL(t *testing.T, stderr *output) string {
	t.Helper()
	re := regexp.MustCompile(`health at (http://\S+/healthz)`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no health endpoint; stderr: %s", stderr)
		}
	}
}

// TestElectHealth: over HTTP, the leader's and a standby's endpoints
// answer 200 (leading, standing by); --health with --listen, or on an
// address it cannot listen on, is a usage error.
func TestElectHealth(t *testing.T) {
	nodes, _ := startNodes(t, 3)
	began := time.Now()
	leader, lout, lerr := start(t, nil, "elect", "--nodes", nodes, "--health", "127.0.0.1:0", "svc")
	lurl := healthURL(t, lerr)
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(lerr.String(), "leading"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not leading; stderr: %s", lerr)
		}
	}
	if code, body := get(t, lurl); code != http.StatusOK || !strings.Contains(body, "leading") {
		t.Fatalf("leader: %d %q", code, body)
	}
	standby, sout, serr := start(t, nil, "elect", "--nodes", nodes, "--health", "127.0.0.1:0", "svc")
	if code, body := get(t, healthURL(t, serr)); code != http.StatusOK || !strings.Contains(body, "standing by") {
		t.Fatalf("standby: %d %q", code, body)
	}
	_ = standby.Process.Signal(syscall.SIGTERM)
	if r := wait(t, standby, sout, serr, began, 10*time.Second); r.code != 0 {
		t.Fatalf("standby: exit %d; stderr: %s", r.code, r.stderr)
	}
	_ = leader.Process.Signal(syscall.SIGTERM)
	if r := wait(t, leader, lout, lerr, began, 10*time.Second); r.code != 0 {
		t.Fatalf("leader: exit %d; stderr: %s", r.code, r.stderr)
	}
	for _, args := range [][]string{
		{"elect", "--nodes", nodes, "--listen", "--health", "127.0.0.1:0", "svc"},
		{"elect", "--nodes", nodes, "--health", "127.0.0.1:notaport", "svc"},
	} {
		if r := runBinary(t, nil, args...); r.code != exitUsage {
			t.Fatalf("%v: exit %d, want %d; stderr: %s", args, r.code, exitUsage, r.stderr)
		}
	}
}
