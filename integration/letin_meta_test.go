package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestMetadataLockGrantedByRelease: with default options, a Lock and a Do
// with metadata, waiting behind another Client's holder, are each granted
// the key by the release of the one before, without attempts of their own
// (docs/design.md, "With metadata, granted too"): each holds by its
// place's ID, and Inspect shows it as the holder with its metadata; a
// fenced one holds with a fencing token above its predecessor's. Their
// Unlocks leave nothing on the nodes but the fence counter, the metadata
// their looks kept included.
func TestMetadataLockGrantedByRelease(t *testing.T) {
	for _, fenced := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "fenced"}[fenced], func(t *testing.T) {
			var opts []redlock.Option
			place := ".wim"
			if fenced {
				opts, place = []redlock.Option{redlock.WithFencing()}, ".wifm"
			}
			metadataHandOffs(t, place, opts)
		})
	}
}

func metadataHandOffs(t *testing.T, place string, opts []redlock.Option) {
	nodes := StartNodes(t, 3)
	key := UniqueKey(t, nodes)
	holder := newClient(t, Clients(t, nodes, nil))
	waiters, acquires := observedWaiters(t, nodes, 2)
	ctx := t.Context()
	h, err := holder.Lock(ctx, key, opts...)
	if err != nil {
		t.Fatal(err)
	}
	first := lockInBackground(t, func(ctx context.Context) (*redlock.Lock, error) {
		return waiters[0].Lock(ctx, key, append([]redlock.Option{redlock.WithMetadata("host=a")}, opts...)...)
	})
	waitUntil(t, 10*time.Second, "the first waiter queued on every node", queuedOnEvery(t, holder, key, 1))
	worked := make(chan error, 1)
	var seen string // what Inspect showed while the Do held
	go func() {
		worked <- waiters[1].Do(ctx, key, func(ctx context.Context) error {
			s, err := holder.Inspect(ctx, key)
			if err == nil {
				_, seen, _ = s.Holder()
			}
			return err
		}, append([]redlock.Option{redlock.WithMetadata("host=b")}, opts...)...)
	}()
	waitUntil(t, 10*time.Second, "the second waiter queued on every node", queuedOnEvery(t, holder, key, 2))
	heardBy(t, nodes, key)
	if err := h.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := first()
	if !strings.Contains(l.Token(), place) {
		t.Errorf("token %q: not a granted place's ID (%s)", l.Token(), place)
	}
	if l.Fence() <= h.Fence() && h.Fence() != 0 {
		t.Errorf("fencing token %d, not above its predecessor's %d", l.Fence(), h.Fence())
	}
	s, err := holder.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, meta, ok := s.Holder(); !ok || meta != "host=a" {
		t.Errorf("Inspect shows metadata %q (a holder: %v), want host=a", meta, ok)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-worked; err != nil {
		t.Errorf("Do, granted: %v", err)
	}
	if seen != "host=b" {
		t.Errorf("while the Do held, Inspect showed metadata %q, want host=b", seen)
	}
	if got := acquires(); len(got) != 2 {
		t.Errorf("%d acquisitions, want 2", len(got))
	}
	for _, e := range acquires() {
		if !e.LetIn {
			t.Errorf("an acquisition not granted by a release: %+v", e)
		}
		checkLetInNodes(t, e, len(nodes))
	}
	noLockKeysLeft(t, nodes, key)
}

// queuedOnEvery reports whether every node has n waiters in key's queue,
// as c's Inspect sees them.
func queuedOnEvery(t *testing.T, c *redlock.Client, key string, n int) func() bool {
	return func() bool {
		s, err := c.Inspect(t.Context(), key)
		if err != nil {
			return false
		}
		for _, ns := range s.Nodes {
			if ns.Waiting != n {
				return false
			}
		}
		return true
	}
}
