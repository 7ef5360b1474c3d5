package redlock

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// An Observer receives an [Event] for every acquisition attempt, extension,
// release, and early end of a lock. It is called synchronously by the
// goroutine doing the work, so it must be fast and must not call back into
// the [Lock] it is told about. Observers cost nothing when none is set: no
// timing, no event.
type Observer func(Event)

// EventKind says what an [Event] reports.
type EventKind int

const (
	// EventAcquire: an acquisition attempt; Err is nil when it obtained the
	// lock.
	EventAcquire EventKind = iota + 1
	// EventExtend: an extension; Err is nil when a majority extended it. A
	// failed extension leaves the lock valid unless Err matches ErrExpired
	// or ErrTakenOver.
	EventExtend
	// EventRelease: an Unlock; Err is nil when a majority released it.
	EventRelease
	// EventEnd: the lock ended before its release: it expired or was taken
	// over (Err says which); it can no longer be trusted (see Lock.Done).
	EventEnd
)

var eventNames = [...]string{"", "acquire", "extend", "release", "end"}

// String returns the kind's name, as WithLogger writes it ("acquire", …).
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what an [Observer] receives. Tokens are never included: anyone
// with a token can release its lock.
type Event struct {
	Kind EventKind
	// Context is the context of the call the event comes from (Lock,
	// TryLock, Do, Extend, Unlock), for tracing. Events from
	// auto-extension, and EventEnd, carry one without values (from
	// context.Background()). Never nil.
	Context context.Context
	Key     string // the lock key as the caller gave it
	// Read: the event is about the read side of a read-write lock (RLock,
	// TryRLock, RDo, and that reader's Extend, Unlock and end); Key is
	// then "rw:NAME", as for the write side.
	Read bool
	// Attempt, for EventAcquire: the attempt's number within its Lock call,
	// from 1. Only attempts count, not a queued Lock's looks at the wait
	// queue in between (for a semaphore, each sweep of its slots is one).
	Attempt int
	// Queued, for EventAcquire: when the Lock call took its place in the
	// key's wait queue (its ticket: waiters are served in this order); zero
	// for an attempt made before it queued, or by TryLock.
	Queued time.Time
	// HandedOver, for EventAcquire: the attempt was sent by an Unlock of
	// the same Client, in the same batch as its release, for this Lock
	// call, which was the key's next waiter: the hand-off took one round
	// where it takes two between Clients (docs/design.md, "The hand-over
	// inside one Client").
	HandedOver bool
	// LetIn, for EventAcquire: a reader let in by a writer's release, or
	// a mutex's waiter granted the key by a release, on a majority of
	// nodes, without an attempt of its own (its Duration runs from the
	// send of the look its validity counts from); its validity is less
	// than a lease until the extension to its TTL that follows.
	LetIn    bool
	Duration time.Duration // EventAcquire, EventExtend, EventRelease: how long the round took
	Validity time.Duration // a successful EventAcquire or EventExtend: the validity left
	Held     time.Duration // a successful EventRelease, EventEnd: time since the lock was acquired
	Err      error         // why the round failed, or why the lock ended
	Nodes    []NodeResult  // round events: every node asked, in node order; a LetIn acquire's: every node's grant (see NodeResult)
}

// observing reports whether any observer is set.
func (c *Client) observing() bool { return len(c.cfg.observers) > 0 }

func (c *Client) emit(e Event) {
	for _, o := range c.cfg.observers {
		o(e)
	}
}

// nodeResults describes a round over nodes for observers.
func nodeResults(nodes []node, r *round) []NodeResult {
	rs := make([]NodeResult, len(nodes))
	for i, res := range r.results {
		rs[i] = NodeResult{Node: nodes[i].Name(), Err: reason(res)}
		if r.latency != nil {
			rs[i].Latency = r.latency[i]
		}
	}
	return rs
}

// errAdmissionUncounted is a node's reason in a let-in's acquire event
// (letInNodes) where its grant came but does not count: it named a look
// the waiter no longer keeps, or came after the waiter attempted.
var errAdmissionUncounted = errors.New("redlock: granted by a release, but not counted")

// letInNodes describes a let-in's admissions a for its acquire event, in
// node order: nil where a node's admission counts; ErrNodeRestarted where
// the node let it in but the restart guard does not count the node
// (countsFrom); errAdmissionUncounted where it named a look the waiter
// no longer keeps; ErrQueued where the node has not let it in (yet): its
// place waits there.
func (c *Client) letInNodes(a admits) []NodeResult {
	rs := make([]NodeResult, len(c.nodes))
	for i, n := range c.nodes {
		rs[i].Node = n.Name()
		switch bit := uint64(1) << i; {
		case a.counted&bit != 0:
		case a.admitted&bit == 0:
			rs[i].Err = ErrQueued
		case !c.hand.countsFrom(i):
			rs[i].Err = ErrNodeRestarted
		default:
			rs[i].Err = errAdmissionUncounted
		}
	}
	return rs
}

// logObserver logs events with l (WithLogger).
func logObserver(l *slog.Logger) Observer {
	return func(e Event) {
		level := slog.LevelDebug
		switch {
		case e.Kind == EventEnd:
			level = slog.LevelError
		case e.Err != nil && e.Kind != EventAcquire:
			level = slog.LevelWarn
		}
		ctx := context.Background()
		if !l.Enabled(ctx, level) {
			return
		}
		msg := "redlock " + e.Kind.String()
		if e.Err != nil && e.Kind != EventEnd {
			msg += " failed"
		}
		l.LogAttrs(ctx, level, msg, eventAttrs(e)...)
	}
}

func eventAttrs(e Event) []slog.Attr {
	attrs := []slog.Attr{slog.String("key", e.Key)}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
	}
	if !e.Queued.IsZero() {
		attrs = append(attrs, slog.Time("queued", e.Queued))
	}
	if e.Duration > 0 {
		attrs = append(attrs, slog.Duration("duration", e.Duration))
	}
	if e.Validity > 0 {
		attrs = append(attrs, slog.Duration("validity", e.Validity))
	}
	if e.Held > 0 {
		attrs = append(attrs, slog.Duration("held", e.Held))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.String("error", e.Err.Error()))
	}
	for _, n := range e.Nodes {
		na := []any{slog.Duration("latency", n.Latency)}
		if n.Err != nil {
			na = append(na, slog.String("error", n.Err.Error()))
		}
		attrs = append(attrs, slog.Group(n.Node, na...))
	}
	return attrs
}

// WithObserver adds an observer of the Client's events. It may be given
// more than once; observers are called in order. It applies to New.
func WithObserver(o Observer) Option {
	return clientOption("WithObserver", func(c *config) error {
		if o == nil {
			return invalid("nil observer")
		}
		c.observers = append(c.observers, o)
		return nil
	})
}

// WithLogger logs the Client's events with l: acquisitions, extensions and
// releases at Debug, failed extensions and releases at Warn, and locks
// that expired or were taken over at Error. It applies to New.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		return WithObserver(nil)
	}
	return WithObserver(logObserver(l))
}
