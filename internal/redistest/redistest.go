// Package redistest holds what every test package of this repository that
// runs real Redis servers shares: starting redis-server processes, failing
// instead of skipping under CI, and keeping go-redis's own log quiet.
// (The harness in integration/ has more backends: Docker, your own
// servers.)
package redistest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redisproc"
)

// Start starts n redis-server processes on free loopback ports, each with
// its own data directory, stopped when the test ends. Without a
// redis-server binary the test is skipped, or fails under CI (see Need). n
// may be 0, to skip early.
func Start(t testing.TB, n int) []*redisproc.Server {
	t.Helper()
	if _, err := redisproc.Find(); err != nil {
		Need(t, "redis-server", "Debian's redis-server package (make test installs it), or REDIS_SERVER=/path/to/redis-server")
	}
	servers := make([]*redisproc.Server, n)
	for i := range servers {
		s, err := redisproc.Start(redisproc.Config{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		servers[i] = s
	}
	return servers
}

// InCI reports whether the tests run under CI (CI=true, as .ci/run and
// most CI services set it).
func InCI() bool { return os.Getenv("CI") == "true" }

// Need ends a test that lacks a capability: what is missing, and how to
// get it. Outside CI the test is skipped with that message. Under CI it
// fails: a suite that passes by skipping proves nothing.
func Need(t testing.TB, what, howToGet string) {
	t.Helper()
	msg := fmt.Sprintf("needs %s: install or provide %s", what, howToGet)
	if InCI() {
		t.Fatal(msg + " (CI=true: a missing capability fails the test instead of skipping it)")
	}
	t.Skip(msg)
}

// QuietRedisLogs replaces go-redis's logger, which prints a line for every
// failed dial (thousands in a run that kills nodes, burying the failure
// that matters), with one that keeps the last lines in memory. A TestMain
// calls it first and prints RedisLogTail when the run failed.
func QuietRedisLogs() { redis.SetLogger(&logTail) }

// RedisLogTail returns the last lines go-redis logged since QuietRedisLogs,
// with a heading, or "" if it logged nothing.
func RedisLogTail() string {
	logTail.mu.Lock()
	defer logTail.mu.Unlock()
	if logTail.total == 0 {
		return ""
	}
	return fmt.Sprintf("go-redis logged %d lines; the last %d:\n%s\n", logTail.total, len(logTail.lines), strings.Join(logTail.lines, "\n"))
}

// tailLines is how many of go-redis's log lines RedisLogTail keeps.
const tailLines = 20

var logTail tail

type tail struct {
	mu    sync.Mutex
	lines []string
	total int
}

func (l *tail) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total++
	if len(l.lines) == tailLines {
		l.lines = l.lines[1:]
	}
	l.lines = append(l.lines, strings.TrimSpace(fmt.Sprintf(format, v...)))
}
