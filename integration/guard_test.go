package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock"
)

// restartScenario on real redis-server: a holds the key on nodes {0, 1}
// (node 2 refused it); node 0 is killed and restarted at once without
// persistence, forgetting a's key; b, which knew every node, then tries.
func restartScenario(t *testing.T, opts ...redlock.Option) (a, b *redlock.Lock, err error) {
	t.Helper()
	nodes := StartNodes(t, 3)
	needsOwnServers(t, nodes[0])
	key := UniqueKey(t, nodes)
	opts = append(opts, redlock.WithTTL(time.Minute), redlock.WithNodeTimeout(100*time.Millisecond))
	ca := newClient(t, Clients(t, nodes, nil), opts...)
	cb := newClient(t, Clients(t, nodes, nil), opts...)
	warm(t, cb)
	// Node 2 refuses a (someone else holds the key there for 300 ms), so a
	// holds the key on nodes 0 and 1 only.
	if err := Admin(t, nodes[2]).Set(t.Context(), RedisKey(key), "someone-else", 300*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	a, err = ca.TryLock(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, nodes[2:], key, 2*time.Second) // the other key expires
	nodes[0].Restart(t)
	b, err = cb.TryLock(t.Context(), key)
	return a, b, err
}

func TestRestartGuard(t *testing.T) {
	a, _, err := restartScenario(t) // the guard is on by default
	if err == nil {
		t.Fatalf("b got the lock while a holds it with %v left: the restarted node's grant counted", a.Validity())
	}
	if !errors.Is(err, redlock.ErrNotObtained) || !strings.Contains(err.Error(), "restarted recently") {
		t.Fatalf("got %v, want ErrNotObtained naming the restarted node", err)
	}
}

// TestRestartGuardOffIsUnsafe is the canary: without the guard, the same
// restart makes two holders.
func TestRestartGuardOffIsUnsafe(t *testing.T) {
	a, b, err := restartScenario(t, redlock.WithRestartGuard(0))
	if err != nil {
		t.Fatalf("without the guard b should have got the lock (the unsafe case): %v", err)
	}
	if a.Validity() <= 0 || b.Validity() <= 0 {
		t.Fatal("the scenario did not make two valid holders")
	}
	t.Logf("without the guard: two holders, validities %v and %v", a.Validity().Round(time.Second), b.Validity().Round(time.Second))
}
