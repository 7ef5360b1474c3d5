package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// TestSetGrantedByReleases: on real redis-server, with default options,
// a multi-key Lock of three keys, waiting for two held by two other
// Clients (the third is free), is granted each key by a release, without
// an attempt of its own (docs/design.md, "A set's keys, granted too"):
// the first release leaves the first key set to the waiter's place's ID
// on every node, and the set does not hold; the second grants it the
// second key and the free third (2026-11-29: before, it attempted for
// the third) and makes it hold by that ID, with a validity below the
// waiter lease (1 s) at first and its TTL once the extension that
// follows is in. Its Unlock leaves nothing on the nodes. With metadata,
// each key holds it beside the place's ID on every node.
func TestSetGrantedByReleases(t *testing.T) {
	t.Run("plain", func(t *testing.T) { setGrantedByReleases(t, "") })
	t.Run("metadata", func(t *testing.T) { setGrantedByReleases(t, "host=set") })
}

func setGrantedByReleases(t *testing.T, meta string) {
	nodes := StartNodes(t, 3)
	keys := keyNames(t, nodes, 3)
	ctx := t.Context()
	var held []*redlock.Lock
	for _, k := range keys[:2] {
		l, err := newClient(t, Clients(t, nodes, nil)).Lock(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
		// Lock returns at a majority: its last call lands before the set
		// tries, or the set's first attempt may take the key there first,
		// and the key is held on a bare majority (the set then attempted
		// at the first release: a look that heard the other node did not
		// count the key as held).
		heldEverywhere(t, nodes, k, l.Token())
	}
	var opts []redlock.Option
	if meta != "" {
		opts = append(opts, redlock.WithMetadata(meta))
	}
	waiters, acquires := observedWaiters(t, nodes, 1, opts...)
	set, err := waiters[0].MultiLock(keys)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := set.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitUntil(t, 10*time.Second, "the set queued for both keys on every node", func() bool {
		for _, nd := range nodes {
			for _, k := range keys {
				if Admin(t, nd).ZCard(ctx, RedisKey(k)+":queue").Val() != 1 {
					return false
				}
			}
		}
		return true
	})
	for _, k := range keys {
		heardBy(t, nodes, k)
	}

	if err := held[0].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var place string
	admins := Admins(t, nodes)
	grantedAll := func() bool {
		place = ""
		for _, a := range admins {
			v := a.Get(ctx, RedisKey(keys[0])).Val()
			id, _, _ := strings.Cut(v, "\x00")
			if !strings.Contains(id, ".wi") || place != "" && id != place {
				return false
			}
			place = id
		}
		return true
	}
	if !poll(2*time.Second, grantedAll) {
		logQueues(t, admins, keys, nil)
		if !poll(8*time.Second, grantedAll) {
			logQueues(t, admins, keys, nil)
			t.Fatal("waited 10s for the first key granted to the set's place on every node")
		}
	}
	select {
	case <-got:
		t.Fatal("the set held with one key of two granted")
	default:
	}

	if err := held[1].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() != place {
		t.Errorf("token %q: not its place's ID %q", l.Token(), place)
	}
	if meta != "" { // (a release's last node may answer after the majority)
		for _, k := range keys {
			heldEverywhere(t, nodes, k, place+"\x00"+meta)
		}
	}
	waitUntil(t, 10*time.Second, "the extension to the TTL", func() bool { return l.Validity() > time.Second })
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if a := acquires(); len(a) != 1 || !a[0].LetIn || a[0].Validity > time.Second {
		t.Errorf("want one acquisition, granted by the releases, valid for at most a lease at first: %+v", a)
	}
	for _, k := range keys {
		noKeysLeft(t, nodes, k)
	}
}

// heldEverywhere waits until every node has key held by token (with
// metadata: token NUL metadata, the Queued mark ignored).
func heldEverywhere(t *testing.T, nodes []*Node, key, token string) {
	t.Helper()
	admins := Admins(t, nodes)
	tok, meta, withMeta := strings.Cut(token, "\x00")
	waitUntil(t, 10*time.Second, key+" held by "+strings.ReplaceAll(token, "\x00", " with ")+" on every node", func() bool {
		for _, a := range admins {
			v := a.Get(t.Context(), RedisKey(key)).Val()
			id, m, _ := strings.Cut(v, "\x00")
			if id != tok || withMeta && strings.TrimPrefix(m, "\x02") != meta {
				return false
			}
		}
		return true
	})
}
