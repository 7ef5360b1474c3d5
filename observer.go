package redlock

import (
	"context"
	"log/slog"
	"time"
)

// An Observer receives an [Event] for every acquisition attempt, extension,
// loss and release. It is called synchronously by the goroutine doing the
// work, so it must be fast and must not call back into the [Lock] it is told
// about. Observers cost nothing when none is set: no timing, no event.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to [Observer].
type ObserverFunc func(Event)

// Observe calls f.
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventKind says what an [Event] reports.
type EventKind int

const (
	EventAcquired      EventKind = iota + 1 // an attempt won a majority within validity
	EventRefused                            // an attempt failed: refused, failed nodes, or no validity left
	EventExtended                           // an extension won a majority
	EventExtendFailed                       // an extension failed; the lock may still be valid
	EventLost                               // the lock can no longer be trusted (see Lock.Lost)
	EventReleased                           // an Unlock was confirmed by a majority
	EventReleaseFailed                      // an Unlock was not confirmed by a majority
)

var eventNames = [...]string{"", "acquired", "refused", "extended", "extend-failed", "lost", "released", "release-failed"}

// String returns the kind's name, as WithLogger writes it ("acquired", …).
func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// NodeOutcome is one node's answer in a round.
type NodeOutcome int

const (
	OutcomeOK      NodeOutcome = iota + 1 // granted, extended or released
	OutcomeOurs                           // acquire found our own token (re-entry), refreshed
	OutcomeHeld                           // another token holds the key
	OutcomeAbsent                         // no key (extend, release)
	OutcomeFailed                         // the node answered with an error, its call failed, or its grant did not count (ErrNodeRestarted)
	OutcomeNoReply                        // no answer before the round was decided or timed out
)

var outcomeNames = [...]string{"", "ok", "ours", "held", "absent", "failed", "no-reply"}

// String returns the outcome's name ("ok", "held", …).
func (o NodeOutcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// NodeEvent is one node's part in a round.
type NodeEvent struct {
	Node    string
	Outcome NodeOutcome
	Latency time.Duration // from the start of the round to the node's answer; 0 without one
	Err     error         // OutcomeFailed or OutcomeNoReply
}

// Event is what an [Observer] receives. Tokens are never included: anyone
// with a token can release its lock.
type Event struct {
	Kind EventKind
	// Context is the context of the call the event comes from (Lock,
	// TryLock, Do, Extend, Unlock), for tracing. Events from auto-extension,
	// and EventLost, carry one without values (from context.Background()).
	// Never nil.
	Context  context.Context
	Key      string        // the lock key as the caller gave it
	Attempt  int           // EventAcquired, EventRefused: the attempt's number within its Lock call, from 1
	Duration time.Duration // round events: how long the round took
	Validity time.Duration // EventAcquired, EventExtended: the validity left
	Held     time.Duration // EventLost, EventReleased: time since the lock was acquired
	Err      error         // the error of a failed round, or why the lock was lost
	Nodes    []NodeEvent   // round events: every node asked, in node order
}

// WithObserver adds an observer of the Client's events. It may be given more
// than once; observers are called in order.
func WithObserver(o Observer) Option {
	return clientOption(func(c *config) {
		if o == nil {
			c.lock.fail(invalid("nil observer"))
			return
		}
		c.observers = append(c.observers, o)
	})
}

// WithLogger logs the Client's events with l: acquisitions, refusals,
// extensions and releases at Debug, failed extensions and releases at Warn,
// and losses at Error.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		return WithObserver(nil)
	}
	return WithObserver(logObserver{l})
}

type logObserver struct{ l *slog.Logger }

func (o logObserver) Observe(e Event) {
	level := slog.LevelDebug
	switch e.Kind {
	case EventExtendFailed, EventReleaseFailed:
		level = slog.LevelWarn
	case EventLost:
		level = slog.LevelError
	}
	ctx := context.Background()
	if !o.l.Enabled(ctx, level) {
		return
	}
	attrs := []slog.Attr{slog.String("key", e.Key)}
	if e.Attempt > 0 {
		attrs = append(attrs, slog.Int("attempt", e.Attempt))
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
		na := []any{slog.String("outcome", n.Outcome.String()), slog.Duration("latency", n.Latency)}
		if n.Err != nil {
			na = append(na, slog.String("error", n.Err.Error()))
		}
		attrs = append(attrs, slog.Group(n.Node, na...))
	}
	o.l.LogAttrs(ctx, level, "redlock "+e.Kind.String(), attrs...)
}

// observing reports whether any observer is set.
func (c *Client) observing() bool { return len(c.cfg.observers) > 0 }

func (c *Client) emit(e Event) {
	for _, o := range c.cfg.observers {
		o.Observe(e)
	}
}

// nodeEvents describes a round over nodes for observers.
func nodeEvents(nodes []node, r *round) []NodeEvent {
	evs := make([]NodeEvent, len(nodes))
	for i, res := range r.results {
		ev := NodeEvent{Node: nodes[i].name()}
		if r.latency != nil {
			ev.Latency = r.latency[i]
		}
		switch {
		case res.undecided():
			ev.Outcome, ev.Err = OutcomeNoReply, errUndecided
		case !res.answered: // missed the round's deadline
			ev.Outcome, ev.Err = OutcomeNoReply, res.err
		case res.guarded: // granted, but not counted
			ev.Outcome, ev.Err = OutcomeFailed, ErrNodeRestarted
		case res.status == statusOK:
			ev.Outcome = OutcomeOK
		case res.status == statusRefreshed:
			ev.Outcome = OutcomeOurs
		case res.status == statusHeld:
			ev.Outcome = OutcomeHeld
		case res.status == statusAbsent:
			ev.Outcome = OutcomeAbsent
		default:
			ev.Outcome, ev.Err = OutcomeFailed, res.err
		}
		evs[i] = ev
	}
	return evs
}
