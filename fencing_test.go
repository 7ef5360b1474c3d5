package redlock

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

func TestFencingGrows(t *testing.T) {
	c := newTestClient(t, newFakeNodes(5), WithFencing())
	var last uint64
	for i := range 100 {
		l, err := c.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if f := l.Fence(); f <= last || f >= wire.MaxFence {
			t.Fatalf("acquisition %d: fence %d after %d", i, f, last)
		}
		last = l.Fence()
		if err := l.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		c.bg.Wait()
	}
	plain, err := c.TryLock(t.Context(), "other", WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Fence() == 0 {
		t.Fatal("WithFencing given to New did not apply")
	}
}

// TestFencingCounterexample: taking the largest counter of a majority is not
// monotonic by itself (the example, 3 nodes): {A,B} locks, a client
// that only reaches A bumps it three times, {A,B} locks again, then {B,C}.
// Without the write-back, {B,C} would hand out a token below the one before.
func TestFencingCounterexample(t *testing.T) {
	fakes := newFakeNodes(3)
	a, b, cNode := fakes[0], fakes[1], fakes[2]
	c := newTestClient(t, fakes, WithFencing())
	minority := newTestClient(t, []*fakeNode{a}, WithFencing())
	lockWith := func(up ...*fakeNode) uint64 {
		t.Helper()
		for _, f := range fakes {
			f.setErr(errFakeDown)
		}
		for _, f := range up {
			f.setErr(nil)
		}
		l, err := c.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		c.bg.Wait()
		if err := l.Unlock(t.Context()); !errors.Is(err, nil) && !errors.Is(err, ErrNotObtained) {
			t.Fatal(err)
		}
		c.bg.Wait()
		return l.Fence()
	}
	t1 := lockWith(a, b)
	for range 3 {
		a.setErr(nil)
		l, err := minority.TryLock(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(t.Context())
		minority.bg.Wait()
	}
	t2 := lockWith(a, b)
	t3 := lockWith(b, cNode)
	if !(t1 < t2 && t2 < t3) {
		t.Fatalf("tokens %d, %d, %d: want strictly increasing", t1, t2, t3)
	}
}

// TestFencingUnique: nodes that forget their keys grant to everyone at once,
// so holders overlap; still no two of them get the same token. The overlap
// is built, not hoped for: each node holds every fenced acquire until all
// the TryLocks of a round have reached it, so each round's k grants are in
// flight together everywhere, and the nodes then serve them in whatever
// order their goroutines run. The TryLocks come from two Clients made to
// propose the same tokens (as two processes can, in the same 100 µs).
// Rounds go on until 50 grants. Uniqueness has two defences, the nodes'
// residues and the write-back's refusal where a larger token exists; the
// second case turns the refusal off (nodes acknowledge any write-back), so
// the residues must hold alone.
func TestFencingUnique(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lenient bool
	}{{"as built", false}, {"residues alone", true}} {
		t.Run(tc.name, func(t *testing.T) { testFencingUnique(t, tc.lenient) })
	}
}

func testFencingUnique(t *testing.T, lenient bool) {
	const k, want = 4, 50
	fakes := newFakeNodes(5)
	barriers := make([]*barrier, len(fakes))
	for i, f := range fakes {
		f.amnesia = true
		if lenient {
			f.variant = lenientWriteBack
		}
		b := &barrier{k: k}
		barriers[i] = b
		f.hold = func(o *wire.Op) {
			if o.Kind == wire.OpAcquireFenced {
				b.wait()
			}
		}
	}
	defer func() {
		for _, b := range barriers {
			b.open() // the last round's stragglers
		}
	}()
	clients := []*Client{newTestClient(t, fakes, WithFencing()), newTestClient(t, fakes, WithFencing())}
	proposal := clients[0].propose() + 1<<40 // ahead of the clock: propose goes on from it
	var mu sync.Mutex
	seen := map[uint64]int{}
	grants := 0
	for round := 0; grants < want && round < 1000; round++ {
		var wg sync.WaitGroup
		proposal += k * wire.FenceModulus
		for _, c := range clients {
			c.proposed.Store(proposal) // both Clients propose the same tokens
		}
		for i := range k {
			c := clients[i%2]
			wg.Go(func() {
				l, err := c.TryLock(t.Context(), "k")
				if err != nil {
					return // a larger token was written back first
				}
				mu.Lock()
				seen[l.Fence()]++
				grants++
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	if grants < want {
		t.Fatalf("only %d grants in 1000 rounds of %d overlapping TryLocks", grants, k)
	}
	for f, n := range seen {
		if n > 1 {
			t.Fatalf("token %d handed out %d times", f, n)
		}
	}
}

// barrier holds callers until k of them wait, then lets those k go; once
// opened, it holds nobody.
type barrier struct {
	mu     sync.Mutex
	k, n   int
	gate   chan struct{}
	opened bool
}

func (b *barrier) wait() {
	b.mu.Lock()
	if b.opened {
		b.mu.Unlock()
		return
	}
	if b.gate == nil {
		b.gate = make(chan struct{})
	}
	g := b.gate
	if b.n++; b.n == b.k {
		close(g)
		b.gate, b.n = nil, 0
	}
	b.mu.Unlock()
	<-g
}

// open lets every caller go, now and later.
func (b *barrier) open() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opened = true
	if b.gate != nil {
		close(b.gate)
		b.gate, b.n = nil, 0
	}
}

func TestFencingBadCounter(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"not a number", "hello", "not a whole number"},
		{"negative", "-5", "not a whole number"},
		{"near 2^53", fmt.Sprint(wire.MaxFence - 2), "2^53"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakes := newFakeNodes(3)
			for _, f := range fakes {
				f.set("redlock:{k}:fence", tc.value, -1)
			}
			c := newTestClient(t, fakes, WithFencing())
			_, err := c.TryLock(t.Context(), "k")
			if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrNotObtained saying %q", err, tc.want)
			}
			// A node's plain SET may have granted the key before its counter
			// was read: taken back, in the background for a node that
			// answered after the round was decided. Close waits for it.
			if err := c.Close(t.Context()); err != nil {
				t.Fatal(err)
			}
			for _, f := range fakes {
				if _, held := f.value("redlock:{k}"); held {
					t.Fatal("a node kept the lock despite its bad counter")
				}
			}
		})
	}
}

// TestFencingCountsAgainstValidity: the write-back round, when there is one,
// is part of the acquisition's elapsed time.
func TestFencingCountsAgainstValidity(t *testing.T) {
	maxValidity := testTTL - testTTL/100 - 2*time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		fakes := newFakeNodes(3)
		for _, f := range fakes { // above any proposal: the token needs the write-back
			f.set("redlock:{k}:fence", fmt.Sprint(int64(wire.MaxFence/2)), -1)
		}
		fakes[0].delay = maxValidity * 6 / 10 // in the acquire and again in the write-back
		fakes[2].setErr(errFakeDown)
		c := newTestClient(t, fakes, WithFencing(), WithTTL(testTTL), WithNodeTimeout(time.Hour))
		_, err := c.TryLock(t.Context(), "k")
		if !errors.Is(err, ErrNotObtained) || !strings.Contains(err.Error(), "validity ran out") {
			t.Fatalf("got %v, want a failure for lack of validity", err)
		}
	})
}

// gates blocks chosen ops on chosen fake nodes until opened: the ops of
// kind k sent with token tok to node i wait for gates[{i, k, tok}].
type gateKey struct {
	node  int
	kind  wire.Kind
	token string
}

type gates map[gateKey]chan struct{}

func (g gates) install(fakes []*fakeNode) {
	for i, f := range fakes {
		f.hold = func(o *wire.Op) {
			if ch, ok := g[gateKey{i, o.Kind, o.Token}]; ok {
				<-ch
			}
		}
	}
}

func (g gates) open(i int, k wire.Kind, token string) {
	close(g[gateKey{i, k, token}])
	synctest.Wait()
}

// TestFencingWriteBackYieldsToAnotherHolder builds the schedule behind the
// write-back's rule that a node where another token holds the key does not
// acknowledge (docs/fencing.md). L's attempt spans E's whole tenure: L is
// granted early on node 0 and late on nodes 1 and 4, and between the two, E
// locks on {1, 2, 3} (its acquires to 0 and 4 are slow), writes its token
// back and unlocks. L's proposal is
// larger than E's (it was made later) but smaller than E's token (which a
// node with a high counter handed out). If E's write-back could count node
// 0, where L's key already was, nodes {0, 1, 4} would all take L's proposal
// and L would hold the lock after E with a smaller token. With the rule, E
// needs node 1 or 4, and its write-back there puts their counters above L's
// proposal.
func TestFencingWriteBackYieldsToAnotherHolder(t *testing.T) {
	for _, lenient := range []bool{false, true} {
		t.Run(fmt.Sprintf("lenient=%v", lenient), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e, l := writeBackSchedule(t, lenient)
				switch {
				case !lenient && l <= e:
					t.Fatalf("L locked after E with token %d, E had %d", l, e)
				case lenient && l >= e:
					t.Fatalf("the canary's schedule did not happen: L's token %d, E's %d", l, e)
				}
			})
		})
	}
}

// writeBackSchedule runs TestFencingWriteBackYieldsToAnotherHolder's
// schedule and returns E's and L's tokens.
func writeBackSchedule(t *testing.T, lenient bool) (eFence, lFence uint64) {
	fakes := newFakeNodes(5)
	for _, i := range []int{2, 3} { // counters above every proposal
		fakes[i].set("redlock:{k}:fence", "1000000000000000", -1)
	}
	for _, f := range fakes {
		if lenient {
			f.variant = lenientWriteBack
		}
	}
	g := gates{}
	for _, i := range []int{0, 1, 4} {
		g[gateKey{i, wire.OpFenceWrite, "E"}] = make(chan struct{})
	}
	g[gateKey{0, wire.OpAcquireFenced, "E"}] = make(chan struct{})
	g[gateKey{4, wire.OpAcquireFenced, "E"}] = make(chan struct{})
	for _, i := range []int{1, 2, 3, 4} {
		g[gateKey{i, wire.OpAcquireFenced, "L"}] = make(chan struct{})
	}
	g.install(fakes)
	opts := []Option{WithFencing(), WithTTL(time.Minute), WithNodeTimeout(time.Hour)}
	ce, cl := newTestClient(t, fakes, opts...), newTestClient(t, fakes, opts...)
	var eLock, lLock *Lock
	var eErr, lErr error
	eDone, lDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(eDone); eLock, eErr = ce.TryLock(t.Context(), "k", WithToken("E")) }()
	synctest.Wait() // E: granted on 1, 2, 3; its write-back waits for one of 0, 1, 4
	time.Sleep(time.Millisecond)
	go func() { defer close(lDone); lLock, lErr = cl.TryLock(t.Context(), "k", WithToken("L")) }()
	synctest.Wait() // L: granted on 0, with its proposal
	g.open(0, wire.OpFenceWrite, "E")
	select {
	case <-eDone: // the lenient write-back counted node 0
	default:
		g.open(1, wire.OpFenceWrite, "E")
		g.open(4, wire.OpFenceWrite, "E")
		<-eDone
	}
	if eErr != nil {
		t.Fatal(eErr)
	}
	if err := eLock.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 4, 2, 3} {
		g.open(i, wire.OpAcquireFenced, "L")
	}
	<-lDone
	if lErr != nil {
		t.Fatal(lErr)
	}
	for k, ch := range g { // let the rest through
		select {
		case <-ch:
		default:
			g.open(k.node, k.kind, k.token)
		}
	}
	_ = lLock.Unlock(t.Context())
	return eLock.Fence(), lLock.Fence()
}
