package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ---- 3: contention and hand-off ----

// contended is one contender in the contention measure: Workers
// goroutines (4 when 0). Shared: they share one instance (one process);
// otherwise each has its own (one process each). Each holding lasts Hold
// (contentionHold when 0).
type contended struct {
	contender
	Shared  bool
	Workers int
	Hold    time.Duration
}

func (c contended) hold() time.Duration {
	if c.Hold == 0 {
		return contentionHold
	}
	return c.Hold
}

func (c contended) workers() int {
	if c.Workers == 0 {
		return 4
	}
	return c.Workers
}

// queuedKey is the context key under which contend leaves a *time.Time
// for the instance to fill with the Lock call's ticket, when its library
// has one (redlock's Event.Queued); otherwise the Lock call's start stands
// in for it.
type queuedKey struct{}

// handoffRound is one contender's figures from one round.
type handoffRound struct {
	PerSec   float64       // acquisitions per second
	ToOther  float64       // share of acquisitions that went to another goroutine than the last holder
	GapP50   time.Duration // start of Unlock to the next holder's Lock returning
	GapP99   time.Duration
	OtherP99 time.Duration // the gap's p99 counting only acquisitions by another goroutine
	LockP99  time.Duration // Lock call to return, waiting included
	Attempts float64       // tries per acquisition
	InOrder  float64       // share of acquisitions that no earlier ticket (or arrival) was served after
	Errors   int           // Lock calls that gave up (retries exhausted)
}

// measureContention has each contender's goroutines contend for one key,
// each holding it contentionHold and going straight back for it, for d per
// contender, rounds times interleaved.
func measureContention(ctx context.Context, e *env, cs []contended, rounds int, d time.Duration) ([][]handoffRound, error) {
	out := make([][]handoffRound, len(cs))
	for r := range rounds {
		for _, i := range roundOrder(len(cs), r) {
			c := cs[i]
			h, err := contend(ctx, e, c, fmt.Sprintf("bench:handoff:%d:%d:%d", i, r, time.Now().UnixNano()), d)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			out[i] = append(out[i], h)
		}
	}
	return out, nil
}

// contend runs one contender's round: its goroutines contend for key for d.
func contend(ctx context.Context, e *env, c contended, key string, d time.Duration) (handoffRound, error) {
	var failed atomic.Int64
	insts, owned, err := contenders(ctx, e, c, key, &failed)
	defer func() {
		for _, in := range owned {
			in.close()
		}
	}()
	if err != nil {
		return handoffRound{}, err
	}
	r := &contention{key: key, hold: c.hold(), lastHolder: -1, deadline: time.Now().Add(d)}
	var wg sync.WaitGroup
	for g, in := range insts {
		wg.Go(func() { r.work(ctx, g, in) })
	}
	wg.Wait()
	if r.firstErr != nil {
		return handoffRound{}, r.firstErr
	}
	return r.figures(d, failed.Load()), ctx.Err()
}

// contenders builds an instance per goroutine (one shared by all, when
// c.Shared), each warmed up; owned are those to close.
func contenders(ctx context.Context, e *env, c contended, key string, failed *atomic.Int64) (insts, owned []instance, err error) {
	insts = make([]instance, c.workers())
	for g := range insts {
		if c.Shared && g > 0 {
			insts[g] = insts[0]
			continue
		}
		in, err := e.build(c.contender, failed)
		if err != nil {
			return nil, owned, err
		}
		insts[g] = in
		owned = append(owned, in)
		// Warm it up (connections, scripts) on a key of its own, as a
		// running service would be: the measure is of steady contention.
		if err := in.cycle(ctx, fmt.Sprintf("%s:warm:%d", key, g)); err != nil {
			return nil, owned, fmt.Errorf("warm-up: %w", err)
		}
	}
	return insts, owned, nil
}

// contention is one round of the contention measure, as its goroutines
// record it.
type contention struct {
	key      string
	hold     time.Duration
	deadline time.Time

	mu          sync.Mutex
	lastHolder  int
	unlockStart time.Time
	gaps, locks []time.Duration
	otherGaps   []time.Duration
	tickets     []time.Time // of each acquisition, in the order served
	toOther     int
	giveUps     int
	firstErr    error
}

// contentionHold is how long each holder holds the key in the contention
// measure (-contention-hold; 1 ms in the published figures).
var contentionHold = time.Millisecond

// work is goroutine g: lock, hold r.hold, unlock, until the
// deadline or a failure.
func (r *contention) work(ctx context.Context, g int, in instance) {
	for ctx.Err() == nil {
		t0 := time.Now()
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ticket := new(time.Time)
		lctx = context.WithValue(lctx, queuedKey{}, ticket)
		unlock, err := in.lock(lctx, r.key)
		cancel()
		if err != nil {
			if r.gaveUp(err) {
				return
			}
			continue
		}
		if !r.acquired(g, t0, ticket) {
			_ = unlock(context.Background())
			return
		}
		time.Sleep(r.hold)
		r.mu.Lock()
		r.unlockStart = time.Now()
		r.mu.Unlock()
		if err := unlock(context.Background()); err != nil {
			r.mu.Lock()
			if r.firstErr == nil {
				r.firstErr = fmt.Errorf("unlock: %w", err)
			}
			r.mu.Unlock()
			return
		}
	}
}

// gaveUp counts a Lock call that gave up, and reports whether to stop.
func (r *contention) gaveUp(err error) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.giveUps++
	if r.giveUps > 1000 && r.firstErr == nil {
		r.firstErr = fmt.Errorf("1000 Lock calls gave up, the last with: %w", err)
	}
	return r.firstErr != nil || now.After(r.deadline)
}

// acquired records goroutine g's acquisition of a Lock call made at t0;
// false: the round is over (release, and stop).
func (r *contention) acquired(g int, t0 time.Time, ticket *time.Time) bool {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.After(r.deadline) || r.firstErr != nil {
		return false
	}
	r.locks = append(r.locks, now.Sub(t0))
	if ticket.IsZero() {
		*ticket = t0
	}
	r.tickets = append(r.tickets, *ticket)
	if r.lastHolder >= 0 {
		r.gaps = append(r.gaps, now.Sub(r.unlockStart))
		if g != r.lastHolder {
			r.toOther++
			r.otherGaps = append(r.otherGaps, now.Sub(r.unlockStart))
		}
	}
	r.lastHolder = g
	return true
}

// figures summarizes the round of d, with failed the failed attempts.
func (r *contention) figures(d time.Duration, failed int64) handoffRound {
	h := handoffRound{PerSec: float64(len(r.locks)) / d.Seconds(), Errors: r.giveUps}
	if len(r.gaps) > 0 {
		g := sorted(r.gaps)
		h.GapP50, h.GapP99 = pct(g, 0.50), pct(g, 0.99)
		h.ToOther = float64(r.toOther) / float64(len(r.gaps))
		h.OtherP99 = pct(sorted(r.otherGaps), 0.99)
	}
	if len(r.locks) > 0 {
		h.LockP99 = pct(sorted(r.locks), 0.99)
		h.Attempts = float64(int64(len(r.locks))+failed) / float64(len(r.locks))
		h.InOrder = inOrder(r.tickets)
	}
	return h
}

// inOrder returns the share of acquisitions, given their tickets in the
// order they were served, that were served before every later-ticketed
// one: acquisition i is out of order when some acquisition served after it
// had an earlier ticket (it waited, and i overtook it).
func inOrder(tickets []time.Time) float64 {
	if len(tickets) == 0 {
		return 0
	}
	ok := 0
	var least time.Time // the earliest ticket served after i
	for i := len(tickets) - 1; i >= 0; i-- {
		if least.IsZero() || !tickets[i].After(least) {
			ok++
		}
		if least.IsZero() || tickets[i].Before(least) {
			least = tickets[i]
		}
	}
	return float64(ok) / float64(len(tickets))
}
