package redlock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// This file is one term of leading an election: the Leadership a
// campaign wins, and Lead, which campaigns, runs work while leading and
// resigns.

// Campaign waits until this caller leads the election, or ctx ends or the
// Client is closed, and returns the leadership. value is advertised to
// [Election.Leader] and [Election.Observe] while it leads (at most 4075
// bytes; [Leadership.Proclaim] changes it).
//
// Candidates wait in the order they started campaigning, across processes
// (see [Client.Lock]). When the leader resigns, the first candidate is told
// at once; when the leader dies, it takes over when the leader's keys have
// run out on a majority of nodes: about the TTL after the leader's last
// extension, never before the dead leader's validity ended.
//
// A candidate leads once it holds the election's lock and has stored its
// term and value on a majority of nodes. Usually its grant stores them,
// and Campaign returns with the lock; when some nodes' fence counters
// were ahead of its proposal, it announces the term in one more round
// (docs/election.md), and should that fail, it resigns and campaigns
// again. On failure the error is that of [Client.Lock].
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	return e.campaign(ctx, value, nil)
}

func (e *Election) campaign(ctx context.Context, value string, onEnd func(error)) (*Leadership, error) {
	if len(value) > maxValueLen {
		return nil, invalid("value is %d bytes, more than %d", len(value), maxValueLen)
	}
	lc := e.lc
	lc.meta = encodeLeader(0, 0, value)
	for failed := 1; ; failed++ {
		// Each lock won has a gate of its own: the end of a lock given back
		// after a failed announcement is no leadership's end.
		var gate *endGate
		if onEnd != nil {
			gate = &endGate{onEnd: onEnd}
			lc.onEnd = gate.end
		}
		l, err := e.c.lockQueued(ctx, e.target, &lc)
		if err != nil {
			return nil, err
		}
		if term := l.fence; byProposal(term) {
			e.confirm(l, value) // the grant announced it
		} else {
			err = l.proclaim(ctx, encodeLeader(uint64(term), 1, value), term)
		}
		if err == nil {
			if gate != nil {
				gate.open()
			}
			return &Leadership{e: e, l: l, value: value, seq: 1}, nil
		}
		// Leading unannounced would leave Leader and Observe blind: give
		// the lock back and start again, unless waiting cannot help.
		_ = l.Unlock(context.WithoutCancel(ctx))
		if errors.Is(err, ErrUnusable) || ctx.Err() != nil {
			return nil, err
		}
		d, ok := lc.retry(failed)
		if !ok {
			return nil, err
		}
		if _, werr := e.c.sleepOrWake(ctx, nil, min(d, time.Second)); werr != nil {
			return nil, errors.Join(err, werr)
		}
	}
}

// confirm completes the announcement a grant made (term l.fence, which a
// majority of nodes took: see byProposal), without waiting: each node
// that granted wrote it "by grant" (wire's acquireElectionSrc), which a
// reader believes only while it hears a majority of them; the same
// announcement proclaimed (sent, not awaited) is believed from any one
// node, so that the leader stays visible should some of those nodes fail.
// It goes ahead of anything the leadership sends the nodes next.
func (e *Election) confirm(l *Lock, value string) {
	o, ttl := l.proclaimOp(encodeLeader(uint64(l.fence), 1, value), l.fence)
	e.c.post(context.Background(), o, e.c.nodes, ttl)
}

// endGate holds back the early end of a lock (its onEnd: expired, taken
// over, or the Client closing) until the lock is a leadership, announced;
// an end that came before is passed on then. Close may end the lock while
// its announcement is still on its way back.
type endGate struct {
	mu     sync.Mutex
	opened bool
	held   error // the first end before the gate opened
	onEnd  func(error)
}

func (g *endGate) end(err error) {
	g.mu.Lock()
	if !g.opened {
		if g.held == nil {
			g.held = err
		}
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.onEnd(err)
}

// open passes on ends from now on, and the one held, if any.
func (g *endGate) open() {
	g.mu.Lock()
	g.opened = true
	held := g.held
	g.mu.Unlock()
	if held != nil {
		g.onEnd(held)
	}
}

// Leadership is one term of leading an election, from [Election.Campaign].
// It is kept alive on the nodes (auto-extension) until Resign, until the
// Client is closed, or until it can no longer be kept, which its lock's
// Done tells ([Leadership.Lock]).
type Leadership struct {
	e     *Election
	l     *Lock
	mu    sync.Mutex
	value string // advertised
	seq   uint64 // announcements made
}

// Term returns the leadership's term: its fencing token, strictly larger
// than every earlier leadership's of the election, and never shared.
// Downstream systems that refuse a term lower than one they have seen are
// safe from a leader that was paused past its leadership (docs/election.md).
func (ld *Leadership) Term() uint64 { return ld.l.Fence() }

// Value returns the value the leadership advertises.
func (ld *Leadership) Value() string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.value
}

// Lock returns the lock under the leadership. Its Done is closed when the
// leadership ends: after Resign or Close, or when it could not be
// extended, TTL/10 before its validity runs out (so that the leader has
// that long to stop before another candidate can lead); its Err then says
// why: an error matching [ErrExpired] or [ErrTakenOver] (lost), or
// [ErrReleased] (resigned, or the Client closed). Its Validity is how long
// the leadership is valid at least. Unlock on it is Resign.
func (ld *Leadership) Lock() *Lock { return ld.l }

// Resign ends the leadership at once: the next candidate is woken and
// leads about one round trip later. Errors are those of [Lock.Unlock];
// after the leadership ended for another reason, it returns that reason.
func (ld *Leadership) Resign(ctx context.Context) error { return ld.l.Unlock(ctx) }

// Proclaim changes the value the leadership advertises, without an
// election: it succeeds when a majority of nodes stored it, and observers
// see it. On failure the error is a [*QuorumError]: matching ErrExpired or
// ErrTakenOver, the leadership has ended; matching ErrNotObtained, too few
// nodes answered and the leadership goes on (nodes may show either value).
func (ld *Leadership) Proclaim(ctx context.Context, value string) error {
	if len(value) > maxValueLen {
		return invalid("value is %d bytes, more than %d", len(value), maxValueLen)
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	// A failed announcement may still have reached some nodes: its number
	// is used up either way, so that the next one reads as newer.
	ld.seq++
	if err := ld.l.proclaim(ctx, encodeLeader(ld.Term(), ld.seq, value), int64(ld.Term())); err != nil {
		return err
	}
	ld.value = value
	return nil
}

// Lead campaigns with value, runs fn while leading, and resigns when fn
// returns. fn's context is cancelled when the leadership is lost, with
// [context.Cause] an error matching ErrExpired or ErrTakenOver, TTL/10
// before it could have run out (a leadership granted by its
// predecessor's resignation, until its first extension, which comes at
// once: a tenth of the validity it was granted with), or when the Client
// is closed (cause [ErrClosed]); fn must then stop. Its Err and Done look at the clock (as
// [Lock.Err] does), so a leader resumed after a pause past that point
// finds its context cancelled at its first look. Lead returns fn's error
// joined with the leadership's: the campaign's error, why it was lost, or
// the resignation's.
//
// With [WithRecampaign], a lost leadership is followed by a new campaign
// (and fn runs again, in a new term) until ctx ends, fn returns while
// leading, or the Client is closed.
func (e *Election) Lead(ctx context.Context, value string, fn func(ctx context.Context, ld *Leadership) error, opts ...Option) error {
	if fn == nil {
		return invalid("nil function")
	}
	var lc lockConfig
	if err := applyCall(&lc, toLead, opts); err != nil {
		return err
	}
	for {
		err, lost := e.leadOnce(ctx, value, fn)
		if !lost || !lc.recampaign || ctx.Err() != nil {
			return err
		}
	}
}

// leadOnce is one term of Lead; lost reports that the leadership ended
// under fn (not by Close).
func (e *Election) leadOnce(ctx context.Context, value string, fn func(ctx context.Context, ld *Leadership) error) (err error, lost bool) {
	work, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ld, err := e.campaign(ctx, value, func(err error) { cancel(err) })
	if err != nil {
		return err, false
	}
	err = fn(lockContext{work, ld.l}, ld)
	ended := ld.l.Err() // before the resignation: nil unless the leadership was lost
	rerr := ld.Resign(context.WithoutCancel(ctx))
	switch cause := context.Cause(work); {
	case errors.Is(cause, ErrClosed):
		return errors.Join(err, cause), false
	case ended != nil:
		return errors.Join(err, ended), true
	case rerr != nil:
		return errors.Join(err, rerr), false
	}
	return err, false
}

// WithRecampaign makes [Election.Lead] campaign again after a lost
// leadership, instead of returning. It applies to Lead only.
func WithRecampaign() Option {
	return lockOption("WithRecampaign", toLead, func(c *lockConfig) error {
		c.recampaign = true
		return nil
	})
}
