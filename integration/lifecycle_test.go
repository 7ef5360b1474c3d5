package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// deadlines records, from observer events, until when the lock is valid:
// the moment of each grant or extension plus the validity it reported. It
// also counts events by kind, and lets a test wait for one.
type deadlines struct {
	mu     sync.Mutex
	until  time.Time
	kinds  []redlock.EventKind
	events []redlock.Event
}

func (d *deadlines) Observe(e redlock.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.kinds = append(d.kinds, e.Kind)
	d.events = append(d.events, e)
	if (e.Kind == redlock.EventAcquire || e.Kind == redlock.EventExtend) && e.Err == nil {
		d.until = time.Now().Add(e.Validity) // a little later than the true end: conservative for the test
	}
}

func (d *deadlines) get() (time.Time, []redlock.EventKind) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.until, append([]redlock.EventKind(nil), d.kinds...)
}

// count returns how many events matched f.
func (d *deadlines) count(f func(redlock.Event) bool) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, e := range d.events {
		if f(e) {
			n++
		}
	}
	return n
}

// waitEvents waits until n events have matched f.
func (d *deadlines) waitEvents(t *testing.T, n int, what string, f func(redlock.Event) bool) {
	t.Helper()
	waitUntil(t, time.Minute, fmt.Sprintf("%d events: %s", n, what), func() bool { return d.count(f) >= n })
}

// succeeded matches the successful rounds of kind k.
func succeeded(k redlock.EventKind) func(redlock.Event) bool {
	return func(e redlock.Event) bool { return e.Kind == k && e.Err == nil }
}

// TestDoKeepsLock: while the nodes are healthy, Do holds its lock through
// 10 extensions (more than 3 TTLs), with every key keeping a TTL no longer
// than asked.
func TestDoKeepsLock(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	obs := &deadlines{}
	c := newClient(t, Clients(t, nodes, nil), redlock.WithObserver(obs.Observe))
	const ttl = time.Second
	err := c.Do(t.Context(), key, func(ctx context.Context) error {
		for seen := 0; seen < 10; {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			s, err := c.Inspect(ctx, key)
			if err != nil {
				return err
			}
			if _, meta, ok := s.Holder(); !ok || meta != "do-test" {
				return errors.New("the lock is not held by a majority")
			}
			for _, n := range s.Nodes { // a straggling grant may not have landed yet
				if n.Held && (n.TTL <= 0 || n.TTL > ttl) {
					return fmt.Errorf("%s: TTL %v out of (0, %v]", n.Node, n.TTL, ttl)
				}
			}
			// Look again after the next extension.
			seen++
			obs.waitEvents(t, seen, "extensions", succeeded(redlock.EventExtend))
		}
		return nil
	}, redlock.WithTTL(ttl), redlock.WithMetadata("do-test"))
	if err != nil {
		t.Fatal(err)
	}
	if n := obs.count(func(e redlock.Event) bool { return e.Kind == redlock.EventEnd }); n != 0 {
		t.Fatalf("the lock ended early %d times while the nodes were healthy", n)
	}
	waitEmpty(t, nodes, key, 10*time.Second)
}

// TestDoCancelledBeforeValidityEnds: killing 3 of 5 nodes while Do's work
// runs cancels the work's context before the lock's validity ends, with the
// expiry as its cause. (That the margin is exactly TTL/10 is checked in
// virtual time, in the root package.)
func TestDoCancelledBeforeValidityEnds(t *testing.T) {
	nodes := StartNodes(t, 5)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	obs := &deadlines{}
	c := newClient(t, Clients(t, nodes, nil), redlock.WithObserver(obs.Observe))
	const ttl = 2 * time.Second
	var cancelledAt, until time.Time
	var cause error
	err := c.Do(t.Context(), key, func(ctx context.Context) error {
		obs.waitEvents(t, 1, "a first extension", succeeded(redlock.EventExtend))
		for _, n := range nodes[:3] {
			n.Kill(t)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Minute):
			return errors.New("work not cancelled")
		}
		cancelledAt, cause = time.Now(), context.Cause(ctx)
		until, _ = obs.get()
		return ctx.Err()
	}, redlock.WithTTL(ttl))
	if !errors.Is(cause, redlock.ErrExpired) {
		t.Fatalf("cause: got %v, want ErrExpired", cause)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, redlock.ErrExpired) {
		t.Fatalf("Do: got %v, want the work's error and the loss", err)
	}
	if !cancelledAt.Before(until) {
		t.Fatalf("work cancelled %v after the validity ended", cancelledAt.Sub(until))
	}
	t.Logf("work cancelled %v before the validity ended (margin %v)", until.Sub(cancelledAt).Round(time.Millisecond), ttl/10)
}

// TestUnconfirmedUnlockEndsLock: an Unlock that a majority cannot confirm
// (2 of 3 nodes killed) ends the lock all the same, with or without
// auto-extension: Done, waited on since before the Unlock, is closed when
// Unlock returns, and Err matches ErrExpired, although the keys' TTL is a
// minute away.
func TestUnconfirmedUnlockEndsLock(t *testing.T) {
	for _, auto := range []bool{false, true} {
		t.Run(fmt.Sprintf("auto-extended %v", auto), func(t *testing.T) {
			nodes := StartNodes(t, 3)
			needsOwnServers(t, nodes[0])
			key := UniqueKey(t, nodes)
			c := newClient(t, Clients(t, nodes, nil))
			opts := []redlock.Option{redlock.WithTTL(time.Minute)}
			if auto {
				opts = append(opts, redlock.WithAutoExtend(0))
			}
			l, err := c.Lock(t.Context(), key, opts...)
			if err != nil {
				t.Fatal(err)
			}
			waiting := l.Done()
			nodes[0].Kill(t)
			nodes[1].Kill(t)
			if err := l.Unlock(t.Context()); !errors.Is(err, redlock.ErrNotObtained) {
				t.Fatalf("Unlock: got %v, want ErrNotObtained", err)
			}
			select {
			case <-waiting:
			default:
				t.Fatal("Done still open after an Unlock that gave the lock up")
			}
			if err := l.Err(); !errors.Is(err, redlock.ErrExpired) {
				t.Fatalf("Err: got %v, want ErrExpired", err)
			}
		})
	}
}

// TestStalledExtensionNeverAfterUnlock: an extension stuck on a frozen node
// when Unlock runs never leaves the key behind: no extension is sent after
// Unlock returns, and what was queued on the frozen node cannot re-create
// the key once it wakes.
func TestStalledExtensionNeverAfterUnlock(t *testing.T) {
	nodes := StartNodes(t, 5)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	obs := &deadlines{}
	c := newClient(t, Clients(t, nodes, nil), redlock.WithObserver(obs.Observe), redlock.WithNodeTimeout(200*time.Millisecond))
	warm(t, c)
	l, err := c.Lock(t.Context(), key, redlock.WithTTL(2*time.Second), redlock.WithAutoExtend(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	events := watchKey(t, nodes[2], key)
	// Expiries too: the frozen node's release may never be sent (see below).
	if err := Admin(t, nodes[2]).ConfigSet(t.Context(), "notify-keyspace-events", "Kgx$").Err(); err != nil {
		t.Fatal(err)
	}
	nodes[2].Pause(t)
	// Extensions queue up on the frozen node: wait for two of them that it
	// did not answer in time.
	frozen := func(e redlock.Event) bool {
		return e.Kind == redlock.EventExtend && e.Err == nil && e.Nodes[2].Err != nil
	}
	obs.waitEvents(t, 2, "extensions the frozen node missed", frozen)
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, kinds := obs.get()
	time.Sleep(100 * time.Millisecond)
	if _, after := obs.get(); len(after) != len(kinds) {
		t.Fatalf("events after Unlock returned: %v", after[len(kinds):])
	}
	nodes[2].Resume(t)
	waitEmpty(t, nodes, key, 30*time.Second)
	// The frozen node ran the extension that was on the wire when it froze;
	// the calls queued behind it, the Unlock's release among them, reached
	// their deadline first and were never sent, so the key there goes at its
	// TTL. Whether deleted or expired, nothing touched it after it went.
	gone := ""
	for {
		select {
		case m := <-events:
			switch {
			case gone != "":
				t.Fatalf("%q on the key after it was %s", m.Payload, gone)
			case m.Payload == "del" || m.Payload == "expired":
				gone = m.Payload
			}
			continue
		case <-time.After(500 * time.Millisecond):
		}
		break
	}
	if gone == "" {
		t.Fatal("the key's end on the frozen node was not seen")
	}
}

// TestCloseReleasesEverything: Close releases plain, auto-extended and Do
// locks on every node, tells Do's work, and ends a waiting Lock.
func TestCloseReleasesEverything(t *testing.T) {
	nodes := StartNodes(t, 5)
	keys := []string{UniqueKey(t, nodes), UniqueKey(t, nodes), UniqueKey(t, nodes)}
	obs := &deadlines{}
	c, err := redlock.New(Clients(t, nodes, nil), redlock.WithObserver(obs.Observe))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(t.Context(), keys[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(t.Context(), keys[1], redlock.WithAutoExtend(0)); err != nil {
		t.Fatal(err)
	}
	doErr, doStarted := make(chan error, 1), make(chan struct{})
	go func() {
		doErr <- c.Do(context.Background(), keys[2], func(ctx context.Context) error {
			close(doStarted)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-doStarted
	waitErr := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), keys[0], redlock.WithRetry(redlock.RandomBackoff(time.Hour, time.Hour)))
		waitErr <- err
	}()
	obs.waitEvents(t, 1, "the waiting Lock's refusal", func(e redlock.Event) bool { return e.Kind == redlock.EventAcquire && e.Err != nil })
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-doErr; !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("Do: got %v, want its work cancelled with ErrClosed", err)
	}
	if err := <-waitErr; !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("waiting Lock: got %v, want ErrClosed", err)
	}
	for _, k := range keys {
		waitEmpty(t, nodes, k, 10*time.Second)
	}
	if _, err := c.TryLock(t.Context(), keys[0]); !errors.Is(err, redlock.ErrClosed) {
		t.Fatalf("TryLock after Close: got %v, want ErrClosed", err)
	}
}

// waitFor starts a Lock of key in c whose retry timer is an hour, so that
// only a hand-off can get it the lock in a test's time; it unlocks at once
// and reports on the channel.
func waitFor(t *testing.T, c *redlock.Client, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := c.Lock(t.Context(), key, redlock.WithRetry(redlock.RandomBackoff(time.Hour, time.Hour)))
		if err == nil {
			err = l.Unlock(t.Context())
		}
		got <- err
	}()
	return got
}

// TestHandoffAcrossClients: a Lock waiting in another Client (another
// process, as far as the nodes know) is woken by the release notice, not by
// its retry timer (an hour here).
func TestHandoffAcrossClients(t *testing.T) {
	nodes := StartNodes(t, 5)
	key := UniqueKey(t, nodes)
	a := newClient(t, Clients(t, nodes, nil))
	b := newClient(t, Clients(t, nodes, nil))
	// A one-minute TTL: the waiter's sleep, bounded by the holder's PTTL,
	// cannot end within the test's 30 s, so only the notice can wake it.
	holder, err := a.TryLock(t.Context(), key, redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	got := waitFor(t, b, key)
	waitSubscribed(t, nodes...) // b's first attempt failed and it subscribed
	start := time.Now()
	if err := holder.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("hand-off to the other Client took %v", time.Since(start).Round(time.Microsecond))
	case <-time.After(30 * time.Second): // the holder's TTL would wake it at 60 s
		t.Fatal("the other Client's waiter was not woken by the release notice")
	}
}
