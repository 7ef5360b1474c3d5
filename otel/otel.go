// Package redlockotel turns redlock's observer events into OpenTelemetry
// metrics and spans. It is a module of its own, so that the core library
// does not depend on OpenTelemetry.
//
//	obs, err := redlockotel.New() // the global MeterProvider and TracerProvider
//	locker, err := redlock.New(clients, redlock.WithObserver(obs.Observe))
//
// Metrics (all with the attribute redlock.key only when WithKeyAttribute is
// given, since keys can be unbounded):
//
//	redlock.acquire.duration   histogram, s   one acquisition attempt; outcome = acquired | refused, reason
//	redlock.attempts           counter        attempts, by outcome and reason
//	redlock.hold.duration      histogram, s   from acquisition to release or early end; outcome = released | expired | taken_over
//	redlock.extend.failures    counter        extensions that did not win a majority
//	redlock.early_ends         counter        locks that ended before their release; reason = expired | taken_over
//	redlock.node.errors        counter        node answers that failed or never came; redlock.node
//
// Spans: one per acquisition attempt, extension and release, named
// "redlock.acquire", "redlock.extend" and "redlock.release", timed from the
// round's start to its end and parented on the caller's context. Each node's
// answer is a span event; a read-write lock's read side (Event.Read) has
// the attribute redlock.read, and an attempt sent with the release of a
// lock of the same Client (Event.HandedOver) redlock.handed_over. A lock
// that ends early (it expired or was
// taken over) is a "redlock.end" span with an error status.
package redlockotel

import (
	"context"
	"errors"
	"time"

	"github.com/redlock-go/redlock"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/redlock-go/redlock"

// Observer records metrics and spans; its Observe method is a
// [redlock.Observer].
type Observer struct {
	tracer  trace.Tracer
	withKey bool

	acquire        metric.Float64Histogram
	attempts       metric.Int64Counter
	hold           metric.Float64Histogram
	extendFailures metric.Int64Counter
	earlyEnds      metric.Int64Counter
	nodeErrors     metric.Int64Counter
}

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	withKey bool
}

// Option configures [New].
type Option func(*config)

// WithMeterProvider sets the MeterProvider; the default is the global one.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets the TracerProvider; the default is the global one.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithKeyAttribute adds the lock key as the attribute redlock.key to
// metrics too (it is always on spans). Use it only when the set of keys is
// small: every key is a new time series.
func WithKeyAttribute() Option { return func(c *config) { c.withKey = true } }

// New returns an Observer that records through the given providers.
func New(opts ...Option) (*Observer, error) {
	c := config{mp: otel.GetMeterProvider(), tp: otel.GetTracerProvider()}
	for _, o := range opts {
		o(&c)
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{tracer: c.tp.Tracer(ScopeName), withKey: c.withKey}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	o.acquire, err = m.Float64Histogram("redlock.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one acquisition attempt, from the first request to the decision."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5))
	add(err)
	o.attempts, err = m.Int64Counter("redlock.attempts", metric.WithDescription("Acquisition attempts, by outcome and reason."))
	add(err)
	o.hold, err = m.Float64Histogram("redlock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long locks were held, from acquisition to release or early end."))
	add(err)
	o.extendFailures, err = m.Int64Counter("redlock.extend.failures", metric.WithDescription("Extensions that did not win a majority."))
	add(err)
	o.earlyEnds, err = m.Int64Counter("redlock.early_ends", metric.WithDescription("Locks that ended before their release: expired or taken over."))
	add(err)
	o.nodeErrors, err = m.Int64Counter("redlock.node.errors", metric.WithDescription("Node answers that failed or never came, by node."))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return o, nil
}

// Observe records e: pass it to [redlock.WithObserver].
func (o *Observer) Observe(e redlock.Event) {
	ctx := e.Context
	if ctx == nil {
		ctx = context.Background()
	}
	var keyAttr []attribute.KeyValue
	if o.withKey {
		keyAttr = []attribute.KeyValue{attribute.String("redlock.key", e.Key)}
	}
	switch e.Kind {
	case redlock.EventAcquire:
		outcome, reason := "acquired", ""
		if e.Err != nil {
			outcome, reason = "refused", Reason(e)
		}
		attrs := append(keyAttr, attribute.String("outcome", outcome))
		if reason != "" {
			attrs = append(attrs, attribute.String("reason", reason))
		}
		set := metric.WithAttributes(attrs...)
		o.acquire.Record(ctx, e.Duration.Seconds(), set)
		o.attempts.Add(ctx, 1, set)
		o.span(ctx, "redlock.acquire", e, attrs...)
	case redlock.EventExtend:
		if e.Err != nil {
			o.extendFailures.Add(ctx, 1, metric.WithAttributes(keyAttr...))
		}
		o.span(ctx, "redlock.extend", e)
	case redlock.EventRelease:
		if e.Err == nil {
			o.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributes(append(keyAttr, attribute.String("outcome", "released"))...))
		}
		o.span(ctx, "redlock.release", e)
	case redlock.EventEnd:
		why := "expired"
		if errors.Is(e.Err, redlock.ErrTakenOver) {
			why = "taken_over"
		}
		o.earlyEnds.Add(ctx, 1, metric.WithAttributes(append(keyAttr, attribute.String("reason", why))...))
		o.hold.Record(ctx, e.Held.Seconds(), metric.WithAttributes(append(keyAttr, attribute.String("outcome", why))...))
		o.span(ctx, "redlock.end", e)
	}
	for _, n := range e.Nodes {
		if nodeFailed(n) {
			o.nodeErrors.Add(ctx, 1, metric.WithAttributes(attribute.String("redlock.node", n.Node)))
		}
	}
}

// nodeFailed reports whether a node failed or did not answer, rather than
// answer for the lock (held by another token, no key) or be discounted by
// the restart guard.
func nodeFailed(n redlock.NodeResult) bool {
	return n.Err != nil && !errors.Is(n.Err, redlock.ErrHeld) && !errors.Is(n.Err, redlock.ErrNoKey) && !errors.Is(n.Err, redlock.ErrNodeRestarted)
}

// span records a finished span for e: it started e.Duration ago.
func (o *Observer) span(ctx context.Context, name string, e redlock.Event, attrs ...attribute.KeyValue) {
	end := time.Now()
	_, s := o.tracer.Start(ctx, name, trace.WithTimestamp(end.Add(-e.Duration)), trace.WithSpanKind(trace.SpanKindClient))
	s.SetAttributes(attribute.String("redlock.key", e.Key))
	if e.Read {
		s.SetAttributes(attribute.Bool("redlock.read", true))
	}
	s.SetAttributes(attrs...)
	if e.Attempt > 0 {
		s.SetAttributes(attribute.Int("redlock.attempt", e.Attempt))
	}
	if e.HandedOver {
		s.SetAttributes(attribute.Bool("redlock.handed_over", true))
	}
	if e.Validity > 0 {
		s.SetAttributes(attribute.Float64("redlock.validity_s", e.Validity.Seconds()))
	}
	if e.Held > 0 {
		s.SetAttributes(attribute.Float64("redlock.held_s", e.Held.Seconds()))
	}
	for _, n := range e.Nodes {
		na := []attribute.KeyValue{attribute.String("redlock.node", n.Node), attribute.Float64("latency_s", n.Latency.Seconds())}
		if n.Err != nil {
			na = append(na, attribute.String("error", n.Err.Error()))
		}
		s.AddEvent("node", trace.WithAttributes(na...), trace.WithTimestamp(end.Add(-e.Duration).Add(n.Latency)))
	}
	if e.Err != nil {
		s.SetStatus(codes.Error, e.Err.Error())
	}
	s.End(trace.WithTimestamp(end))
}

// Reason classifies a refused attempt: "context" (the caller's context
// ended), "held" (another token holds the key on some node), "restarted"
// (the restart guard discounted a node), "nodes" (nodes failed or did not
// answer), or "validity" (a majority came too late).
func Reason(e redlock.Event) string {
	if errors.Is(e.Err, context.Canceled) || errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, redlock.ErrClosed) {
		return "context"
	}
	held, failed := 0, 0
	for _, n := range e.Nodes {
		switch {
		case errors.Is(n.Err, redlock.ErrNodeRestarted):
			return "restarted"
		case errors.Is(n.Err, redlock.ErrHeld):
			held++
		case nodeFailed(n):
			failed++
		}
	}
	switch {
	case held > 0:
		return "held"
	case failed > 0:
		return "nodes"
	}
	return "validity"
}
