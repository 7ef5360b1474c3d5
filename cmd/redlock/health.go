package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/redlock-go/redlock"
)

// health is `redlock elect --health`'s endpoint, as client-go's
// leader-election HealthzAdaptor is for Kubernetes: GET /healthz answers
// 200 while the process stands by (campaigning) or leads with its lease
// renewed, and 503 when it leads but could not renew: its leadership's
// validity fell below the margin (auto-extension renews it every TTL/3,
// so a healthy leader has about two thirds of its TTL left at worst), or
// the leadership ended. A liveness probe or a load balancer can then act
// before, or as, another process takes over.
type health struct {
	mu     sync.Mutex
	margin time.Duration
	ld     *redlock.Leadership // nil while standing by
}

// healthMargin is the validity below which a leader is unhealthy: a third
// of the TTL, the time between two renewals.
func healthMargin(ttl time.Duration) time.Duration { return ttl / 3 }

// leading records the leadership won.
func (h *health) leading(ld *redlock.Leadership) {
	h.mu.Lock()
	h.ld = ld
	h.mu.Unlock()
}

// status is the endpoint's answer: the HTTP status and a line of text.
func (h *health) status() (int, string) {
	h.mu.Lock()
	ld, margin := h.ld, h.margin
	h.mu.Unlock()
	if ld == nil {
		return http.StatusOK, "standing by"
	}
	l := ld.Lock()
	if err := l.Err(); err != nil {
		return http.StatusServiceUnavailable, fmt.Sprintf("term %d: the leadership ended: %v", ld.Term(), err)
	}
	v := l.Validity()
	if v < margin {
		return http.StatusServiceUnavailable, fmt.Sprintf("term %d: leading but not renewed: %v of validity left, less than %v", ld.Term(), v.Round(time.Millisecond), margin)
	}
	return http.StatusOK, fmt.Sprintf("term %d: leading, %v of validity left", ld.Term(), v.Round(time.Millisecond))
}

func (h *health) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	code, text := h.status()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintln(w, text)
}

// serveHealth serves h on addr (/healthz) until the returned stop is
// called, and returns the address it listens on (port 0 picks one). It
// listens before it returns, so a bad address fails at once.
func serveHealth(addr string, h *health) (bound string, stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--health %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/healthz", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln) // ErrServerClosed after stop
	}()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
