package redlock

import (
	"sync"
	"time"
)

// simStall is a Client's connections stalled downstream until a time:
// the nodes run its calls on time, but their replies and the notices of
// its subscriptions reach it only then, in the order sent. It is the
// chaos runs' cut-off Client (toxiproxy's timeout toxic holds what the
// nodes send), which found a reader holding by let-ins its own failed
// attempt had taken with it (docs/design.md, "An attempt that fails
// leaves the let-ins"): the simulator's other faults hold replies or
// calls, never notices. Half of the stalls hold the notices alone
// (holdNotices): a subscription is a connection of its own, so a node's
// reply can come while the notice it published before that reply is
// still held. That is the schedule of the bug above (a reader let in,
// its notices late, attempts; the attempt fails and is taken back; the
// notices come): without it the simulator did not make it in 1,000 seeds.
type simStall struct {
	mu       sync.Mutex
	until    time.Time
	quiet    time.Time // notices alone held until then (holdNotices)
	held     []func()  // notices, in order
	flushing bool      // a flush is scheduled or under way: later notices queue behind it
}

// hold stalls the Client's connections until until (or later, if they
// already are).
func (s *simStall) hold(until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.until) {
		s.until = until
	}
}

// holdNotices holds the Client's notices alone until until (or later):
// its calls and their replies keep their time. Its subscriptions are
// connections of their own, so what stalls one of its connections need
// not stall the others (a reply can come on time while the notice the
// node published before it comes late).
func (s *simStall) holdNotices(until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.quiet) {
		s.quiet = until
	}
}

// noticesUntil is when the notices are held until; callers hold s.mu.
func (s *simStall) noticesUntil() time.Time { return latest(s.until, s.quiet) }

// late is how much longer a reply the node sends now is held.
func (s *simStall) late() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(time.Until(s.until), 0)
}

// deliver runs f, a notice's delivery, now, or once the stall ends,
// after the notices held before it.
func (s *simStall) deliver(f func()) {
	s.mu.Lock()
	if d := time.Until(s.noticesUntil()); d > 0 || s.flushing {
		s.held = append(s.held, f)
		if !s.flushing {
			s.flushing = true
			time.AfterFunc(d, s.flush)
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}

// flush delivers the held notices in order, once the stall has ended.
func (s *simStall) flush() {
	for {
		s.mu.Lock()
		if d := time.Until(s.noticesUntil()); d > 0 { // stalled again meanwhile
			time.AfterFunc(d, s.flush)
			s.mu.Unlock()
			return
		}
		if len(s.held) == 0 {
			s.flushing = false
			s.mu.Unlock()
			return
		}
		f := s.held[0]
		s.held = s.held[1:]
		s.mu.Unlock()
		f()
	}
}

// Watch subscribes through the link: notices pass the Client's stall.
func (n simLink) Watch(channel string, deliver func(channel, payload string), ready func()) (stop func()) {
	return n.fakeNode.Watch(channel, func(ch, payload string) {
		n.stall.deliver(func() { deliver(ch, payload) })
	}, ready)
}
