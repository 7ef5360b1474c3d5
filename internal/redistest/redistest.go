// Package redistest starts redis-server processes for tests that live
// outside the integration harness: the redlock command's and the otel
// module's. (The harness in integration/ has more backends: Docker, your
// own servers.)
package redistest

import (
	"os"
	"testing"

	"github.com/redlock-go/redlock/internal/redisproc"
)

// Start starts n redis-server processes on free loopback ports, each with
// its own data directory, stopped when the test ends. Without a
// redis-server binary the test is skipped, or fails under CI=true: a suite
// that silently skips proves nothing. n may be 0, to skip early.
func Start(t testing.TB, n int) []*redisproc.Server {
	t.Helper()
	if _, err := redisproc.Find(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
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
