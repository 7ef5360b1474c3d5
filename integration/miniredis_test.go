package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// TestMiniredis: miniredis, the in-memory Redis that many Go services use
// in unit tests, cannot run the restart guard's INFO server inside scripts.
// With default options Lock ends at once with ErrUnusable naming
// WithRestartGuard(0), with a context that would let it wait a minute;
// with the guard off, every operation works.
func TestMiniredis(t *testing.T) {
	var clients []redis.UniversalClient
	for range 3 {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		clients = append(clients, c)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newClient(t, clients)
	_, err := c.Lock(ctx, "k")
	if !errors.Is(err, redlock.ErrUnusable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want ErrUnusable at once", err)
	}
	if want := "WithRestartGuard(0)"; !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want it to name %s", err, want)
	}
	t.Log(err)

	c = newClient(t, clients, redlock.WithRestartGuard(0), redlock.WithFencing())
	l, err := c.Lock(ctx, "k", redlock.WithMetadata("unit test"))
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() == 0 {
		t.Fatal("no fencing token")
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	s, err := c.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, meta, ok := s.Holder(); !ok || meta != "unit test" {
		t.Fatalf("Inspect: %+v", s.Nodes)
	}
	if _, err := c.TryLock(ctx, "k"); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("a second holder: got %v, want ErrNotObtained", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
