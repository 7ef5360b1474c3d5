package redlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/redlock-go/redlock/internal/redisproc"
	"github.com/redlock-go/redlock/internal/redistest"
	redlockotel "github.com/redlock-go/redlock/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	redistest.QuietRedisLogs()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if code != 0 {
			fmt.Fprint(os.Stderr, redistest.RedisLogTail())
		}
		os.Exit(code)
	}))
}

// startNodes starts n redis-server processes, stopped when the test ends,
// and returns a client for each.
func startNodes(t *testing.T, n int) ([]redis.UniversalClient, []*redisproc.Server) {
	t.Helper()
	servers := redistest.Start(t, n)
	clients := make([]redis.UniversalClient, n)
	for i, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, DialerRetries: 1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		clients[i] = c
	}
	return clients, servers
}

// TestMetricsAndSpans drives a real 3-node lock through acquisition,
// extension, release, a refusal and a dead node, and checks what the SDK's
// in-memory reader and span recorder received.
func TestMetricsAndSpans(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	obs, err := redlockotel.New(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	clients, servers := startNodes(t, 3)
	c, err := redlock.New(clients, redlock.WithObserver(obs.Observe))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	other, err := redlock.New(clients)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close(context.Background()) })

	ctx, parent := tp.Tracer("test").Start(t.Context(), "job")
	l, err := c.TryLock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := other.TryLock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, "report"); !errors.Is(err, redlock.ErrNotObtained) {
		t.Fatalf("got %v, want a refusal", err)
	}
	_ = held.Unlock(ctx)
	servers[2].Stop()
	l, err = c.TryLock(ctx, "after-crash")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
	parent.End()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m.Data
		}
	}
	attempts := sumBy(t, got["redlock.attempts"], "outcome", "reason")
	if attempts["acquired/"] != 2 || attempts["refused/held"] != 1 {
		t.Fatalf("redlock.attempts: %v, want 2 acquired and 1 refused for held", attempts)
	}
	if n := histCount(t, got["redlock.acquire.duration"]); n != 3 {
		t.Fatalf("redlock.acquire.duration has %d samples, want 3", n)
	}
	if n := histCount(t, got["redlock.hold.duration"]); n != 2 {
		t.Fatalf("redlock.hold.duration has %d samples, want 2", n)
	}
	nodeErrs := sumBy(t, got["redlock.node.errors"], "redlock.node")
	if nodeErrs[servers[2].Addr] == 0 {
		t.Fatalf("redlock.node.errors: %v, want the dead node %s", nodeErrs, servers[2].Addr)
	}

	byName := map[string]int{}
	for _, s := range spans.Ended() {
		byName[s.Name()]++
		if s.Name() == "job" {
			continue
		}
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the caller's span", s.Name())
		}
		if len(s.Events()) == 0 {
			t.Errorf("span %s has no node events", s.Name())
		}
	}
	if byName["redlock.acquire"] != 3 || byName["redlock.extend"] != 1 || byName["redlock.release"] != 2 {
		t.Fatalf("spans: %v", byName)
	}
}

// sumBy adds up an Int64 sum's data points by the values of keys.
func sumBy(t *testing.T, agg metricdata.Aggregation, keys ...string) map[string]int64 {
	t.Helper()
	s, ok := agg.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("not an int64 sum: %T", agg)
	}
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		var k string
		for i, key := range keys {
			if i > 0 {
				k += "/"
			}
			v, _ := dp.Attributes.Value(attribute.Key(key))
			k += v.AsString()
		}
		out[k] += dp.Value
	}
	return out
}

func histCount(t *testing.T, agg metricdata.Aggregation) uint64 {
	t.Helper()
	h, ok := agg.(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("not a float64 histogram: %T", agg)
	}
	var n uint64
	for _, dp := range h.DataPoints {
		n += dp.Count
	}
	return n
}

func TestReason(t *testing.T) {
	for _, tc := range []struct {
		e    redlock.Event
		want string
	}{
		{redlock.Event{Err: context.Canceled}, "context"},
		{redlock.Event{Nodes: []redlock.NodeResult{{Err: redlock.ErrHeld}, {Err: errors.New("connection refused")}}}, "held"},
		{redlock.Event{Nodes: []redlock.NodeResult{{Err: redlock.ErrNodeRestarted}}}, "restarted"},
		{redlock.Event{Nodes: []redlock.NodeResult{{Err: context.DeadlineExceeded}, {}}}, "nodes"},
		{redlock.Event{Nodes: []redlock.NodeResult{{Err: redlock.ErrNoKey}, {}}}, "validity"},
		{redlock.Event{Nodes: []redlock.NodeResult{{}}}, "validity"},
	} {
		if got := redlockotel.Reason(tc.e); got != tc.want {
			t.Errorf("Reason(%+v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}

// TestFlagAttributes: an event of a read-write lock's read side gives its
// span the attribute redlock.read, and an attempt an Unlock of the same
// Client sent (Event.HandedOver) redlock.handed_over; others have neither.
func TestFlagAttributes(t *testing.T) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	obs, err := redlockotel.New(redlockotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	obs.Observe(redlock.Event{Kind: redlock.EventAcquire, Context: t.Context(), Key: "rw:doc", Read: true, Attempt: 1})
	obs.Observe(redlock.Event{Kind: redlock.EventAcquire, Context: t.Context(), Key: "rw:doc", Attempt: 1})
	obs.Observe(redlock.Event{Kind: redlock.EventAcquire, Context: t.Context(), Key: "job", Attempt: 2, HandedOver: true})
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans, want 3", len(ended))
	}
	for i, want := range [][2]bool{{true, false}, {false, false}, {false, true}} {
		var got [2]bool
		for _, a := range ended[i].Attributes() {
			switch a.Key {
			case "redlock.read":
				got[0] = a.Value.AsBool()
			case "redlock.handed_over":
				got[1] = a.Value.AsBool()
			}
		}
		if got != want {
			t.Errorf("span %d: redlock.read, redlock.handed_over %v, want %v", i, got, want)
		}
	}
}
