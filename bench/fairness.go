package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// ---- 8: every primitive under contention ----

// A primitive is one of redlock's lock kinds in the fairness measure: worker
// i of a round locks what locker(c, i, prefix) gives, through its own
// Client (a process of its own).
type primitive struct {
	Name   string // "mutex", "multi-key", ...
	locker func(c *redlock.Client, i int, prefix string) (fairLocker, error)
}

// fairLocker is what one worker locks: its keys (two acquisitions conflict
// when their keys meet, unless both are readers) and how.
type fairLocker struct {
	keys   []string
	reader bool
	lock   func(ctx context.Context) (*redlock.Lock, error)
}

// primitives are the measure's workloads, on 5 nodes with default options.
func primitives() []primitive {
	return []primitive{
		{"mutex", func(c *redlock.Client, _ int, p string) (fairLocker, error) {
			return fairLocker{keys: []string{p}, lock: func(ctx context.Context) (*redlock.Lock, error) { return c.Lock(ctx, p) }}, nil
		}},
		// Overlapping sets and a one-key lock, as issue 28's outside run:
		// {a,b,c}, {c,d}, {b,d,e} and d alone, by worker in turn.
		{"multi-key", func(c *redlock.Client, i int, p string) (fairLocker, error) {
			sets := [][]string{{"a", "b", "c"}, {"c", "d"}, {"b", "d", "e"}, {"d"}}
			var keys []string
			for _, k := range sets[i%len(sets)] {
				keys = append(keys, p+":"+k)
			}
			m, err := c.MultiLock(keys)
			return fairLocker{keys: keys, lock: m.Lock}, err
		}},
		{"semaphore, 2 permits", func(c *redlock.Client, _ int, p string) (fairLocker, error) {
			s, err := c.Semaphore(p, 2)
			return fairLocker{keys: []string{p}, lock: s.Acquire}, err
		}},
		// Writers and readers, by worker in turn.
		{"read-write", func(c *redlock.Client, i int, p string) (fairLocker, error) {
			m, err := c.RWMutex(p)
			if err != nil || i%2 == 0 {
				return fairLocker{keys: []string{p}, lock: m.Lock}, err
			}
			return fairLocker{keys: []string{p}, reader: true, lock: m.RLock}, nil
		}},
	}
}

// fairRound is one primitive's figures from one round.
type fairRound struct {
	PerSec   float64
	Attempts float64 // tries per acquisition
	InOrder  float64 // share of acquisitions that no conflicting earlier ticket was served after
	Least    float64 // the least-served worker's acquisitions ÷ the mean
	GapP50   time.Duration
	GapP99   time.Duration
	// The hand-offs alone (see alone): their share of the gaps, and their
	// gap p99, what a hand-off costs when no other one shares the
	// machine's CPU with it (a mutex's are all alone).
	Alone      float64
	AloneGap99 time.Duration
	Errors     int
	// ServerCPU: the servers' CPU time per acquisition (see env.cpu), what the
	// primitive's hand-offs cost the nodes (every script, look and notice).
	ServerCPU time.Duration
	// NodeScripts: the scripts each node ran per acquisition (see
	// env.scripts; the mean of the 5 nodes).
	NodeScripts float64
	// Kinds: a read-write lock's gaps by what they follow (nil for the
	// other primitives).
	Kinds *rwKinds `json:",omitempty"`
}

// rwKinds splits a read-write lock's hand-off gaps by the holding whose
// release started them and the acquisition they end in, and counts the
// readers one writer's release let in: a writer's gap after readers
// starts at the last reader's release, and a batch's readers each have a
// gap from the same writer's release.
type rwKinds struct {
	Batch                        float64 // readers let in per writer's release that let any in
	ToReaders, ToWriter, Writers gapPair // writer → reader, reader → writer, writer → writer
}

// gapPair is a set of gaps' p50 and p99 (zero: none).
type gapPair struct{ P50, P99 time.Duration }

func pairOf(gaps []time.Duration) gapPair {
	if len(gaps) == 0 {
		return gapPair{}
	}
	g := sorted(gaps)
	return gapPair{pct(g, 0.50), pct(g, 0.99)}
}

// splitKinds is rwKinds of a round's acquisitions, their gaps' starts
// (from) set; nil where no reader took part.
func splitKinds(acqs []*fairAcq) *rwKinds {
	var toR, toW, ww []time.Duration
	batches := map[time.Time]int{}
	for i, a := range acqs {
		if a.from.IsZero() {
			continue
		}
		j := slices.IndexFunc(acqs[:i], func(b *fairAcq) bool { return b.released.Equal(a.from) })
		byReader := j >= 0 && acqs[j].reader
		switch gap := a.got.Sub(a.from); {
		case a.reader:
			toR = append(toR, gap)
			batches[a.from]++
		case byReader:
			toW = append(toW, gap)
		default:
			ww = append(ww, gap)
		}
	}
	if len(toR) == 0 && len(toW) == 0 {
		return nil
	}
	k := &rwKinds{ToReaders: pairOf(toR), ToWriter: pairOf(toW), Writers: pairOf(ww)}
	if len(batches) > 0 {
		k.Batch = float64(len(toR)) / float64(len(batches))
	}
	return k
}

// fairAcq is one acquisition in a fairness round.
type fairAcq struct {
	w                    int
	from                 time.Time // the gap's start (see gapFrom)
	keys                 []string
	reader               bool
	start, got, released time.Time // Lock called, Lock returned, Unlock called
	unlocked             time.Time // Unlock returned
	ticket               time.Time
}

// conflicts reports whether a and b exclude each other.
func (a *fairAcq) conflicts(b *fairAcq) bool {
	return !(a.reader && b.reader) && slices.ContainsFunc(a.keys, func(k string) bool { return slices.Contains(b.keys, k) })
}

// measureFairness runs each primitive with each count of workers for d,
// rounds times interleaved, each holding its lock contentionHold.
func measureFairness(ctx context.Context, e *env, ps []primitive, counts []int, rounds int, d time.Duration) (map[string][]fairRound, error) {
	out := map[string][]fairRound{}
	for r := range rounds {
		for _, k := range roundOrder(len(ps)*len(counts), r) {
			p, n := ps[k/len(counts)], counts[k%len(counts)]
			prefix := fmt.Sprintf("bench:fair:%d:%d:%d", r, n, time.Now().UnixNano())
			f, err := fairRun(ctx, e, p, n, prefix, d)
			if err == nil {
				err = e.released(ctx)
			}
			if err != nil {
				return nil, fmt.Errorf("%s, %d processes: %w", p.Name, n, err)
			}
			name := fairName(p, n)
			out[name] = append(out[name], f)
		}
	}
	return out, nil
}

func fairName(p primitive, n int) string { return fmt.Sprintf("%s, %d processes", p.Name, n) }

// fairRun runs one primitive's round: n workers, a Client each.
func fairRun(ctx context.Context, e *env, p primitive, n int, prefix string, d time.Duration) (fairRound, error) {
	var failed atomic.Int64
	lockers := make([]fairLocker, n)
	for i := range n {
		c, closeC, err := fairClient(e, &failed)
		if err != nil {
			return fairRound{}, err
		}
		defer closeC()
		if lockers[i], err = p.locker(c, i, prefix); err != nil {
			return fairRound{}, err
		}
		// Warm it up (connections, scripts, subscriptions) elsewhere.
		warm, err := p.locker(c, i, prefix+":warm:"+fmt.Sprint(i))
		if err == nil {
			err = hold(ctx, warm)
		}
		if err != nil {
			return fairRound{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	failed.Store(0)
	f := &fairness{deadline: time.Now().Add(d)}
	var wg sync.WaitGroup
	scripts0, err := e.scripts(ctx, 5)
	if err != nil {
		return fairRound{}, err
	}
	_, s0 := e.cpu()
	for i, l := range lockers {
		wg.Go(func() { f.work(ctx, i, l) })
	}
	wg.Wait()
	_, s1 := e.cpu()
	if f.err != nil {
		return fairRound{}, f.err
	}
	scripts1, err := e.scripts(ctx, 5)
	if err != nil {
		return fairRound{}, err
	}
	r := f.figures(n, d, failed.Load())
	if len(f.acqs) > 0 {
		r.ServerCPU = (s1 - s0) / time.Duration(len(f.acqs))
		r.NodeScripts = float64(scripts1-scripts0) / 5 / float64(len(f.acqs))
	}
	return r, ctx.Err()
}

// fairClient is a Client on 5 nodes with the README's node options,
// counting failed attempts and handing tickets to the Lock calls.
func fairClient(e *env, failed *atomic.Int64) (*redlock.Client, func(), error) {
	clients := readmeClients(e.addrs(contender{Nodes: 5}))
	ucs := make([]redis.UniversalClient, len(clients))
	for i, c := range clients {
		ucs[i] = c
	}
	c, err := redlock.New(ucs, redlock.WithObserver(refusals(failed)))
	if err != nil {
		closeClients(clients)
		return nil, nil, err
	}
	return c, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(cctx)
		closeClients(clients)
	}, nil
}

// hold locks once and unlocks.
func hold(ctx context.Context, l fairLocker) error {
	lk, err := l.lock(ctx)
	if err != nil {
		return err
	}
	return lk.Unlock(ctx)
}

// fairness is one round of the measure, as its workers record it.
type fairness struct {
	deadline time.Time
	mu       sync.Mutex
	acqs     []*fairAcq // in the order served
	errors   int
	err      error
}

// work is worker w: lock, hold contentionHold, unlock, until the deadline.
func (f *fairness) work(ctx context.Context, w int, l fairLocker) {
	for ctx.Err() == nil && time.Now().Before(f.deadline) {
		a := &fairAcq{w: w, keys: l.keys, reader: l.reader, start: time.Now()}
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		lk, err := l.lock(context.WithValue(lctx, queuedKey{}, &a.ticket))
		cancel()
		a.got = time.Now()
		f.mu.Lock()
		if err != nil {
			f.errors++
			f.mu.Unlock()
			continue
		}
		if a.ticket.IsZero() {
			a.ticket = a.start
		}
		if a.got.Before(f.deadline) {
			f.acqs = append(f.acqs, a)
		}
		f.mu.Unlock()
		time.Sleep(contentionHold)
		f.mu.Lock()
		a.released = time.Now()
		f.mu.Unlock()
		err = lk.Unlock(context.Background())
		f.mu.Lock()
		a.unlocked = time.Now()
		f.mu.Unlock()
		if err != nil {
			f.mu.Lock()
			f.err = cmp.Or(f.err, fmt.Errorf("unlock: %w", err))
			f.mu.Unlock()
			return
		}
	}
}

// figures summarizes a round of n workers over d.
func (f *fairness) figures(n int, d time.Duration, failed int64) fairRound {
	acqs := f.acqs
	r := fairRound{PerSec: float64(len(acqs)) / d.Seconds(), Errors: f.errors}
	if len(acqs) == 0 {
		return r
	}
	r.Attempts = float64(int64(len(acqs))+failed) / float64(len(acqs))
	per := make([]int, n)
	var gaps, alones []time.Duration
	ok := 0
	for i, a := range acqs {
		per[a.w]++
		if !slices.ContainsFunc(acqs[i+1:], func(b *fairAcq) bool { return b.ticket.Before(a.ticket) && a.conflicts(b) }) {
			ok++
		}
		a.from = gapFrom(acqs, i)
	}
	for i, a := range acqs {
		if !a.from.IsZero() {
			gaps = append(gaps, a.got.Sub(a.from))
			if alone(acqs, i) {
				alones = append(alones, a.got.Sub(a.from))
			}
		}
	}
	r.InOrder = float64(ok) / float64(len(acqs))
	r.Least = float64(slices.Min(per)) / (float64(len(acqs)) / float64(n))
	if len(gaps) > 0 {
		g := sorted(gaps)
		r.GapP50, r.GapP99 = pct(g, 0.50), pct(g, 0.99)
		r.Alone = float64(len(alones)) / float64(len(gaps))
	}
	if len(alones) > 0 {
		r.AloneGap99 = pct(sorted(alones), 0.99)
	}
	r.Kinds = splitKinds(acqs)
	return r
}

// gapFrom is where acquisition i's gap starts: the last release of a
// conflicting holding that came while it waited (zero: none).
func gapFrom(acqs []*fairAcq, i int) (from time.Time) {
	a := acqs[i]
	for _, b := range acqs[:i] {
		if a.conflicts(b) && !b.released.IsZero() && b.released.After(a.start) && b.released.Before(a.got) && b.released.After(from) {
			from = b.released
		}
	}
	return from
}

// alone reports whether acquisition i's hand-off, from its gap's start to
// its Lock returning, had the machine to itself: no other hand-off's gap
// overlapped it (readers let in by one release overlap), no other
// acquisition returned inside it, and no Unlock but the one that started
// it was running in it.
func alone(acqs []*fairAcq, i int) bool {
	a := acqs[i]
	overlaps := func(from, to time.Time) bool { return from.Before(a.got) && to.After(a.from) }
	for j, b := range acqs {
		if j == i {
			continue
		}
		from := b.from
		if from.IsZero() {
			from = b.got
		}
		unlocking := !b.released.IsZero() && !b.released.Equal(a.from) && overlaps(b.released, cmp.Or(b.unlocked, a.got))
		if overlaps(from, b.got) || unlocking {
			return false
		}
	}
	return true
}
