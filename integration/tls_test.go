package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// aclLine is the ACL rule for a lock user, as docs/operations.md gives it:
// the lock's keys, wake and leader channels only, and only the commands the
// library sends or its scripts call. (go-redis sends HELLO on connecting,
// and CLIENT SETINFO on Redis 7.2 and later, whose refusal it ignores; AUTH
// is always allowed.)
const aclLine = "on >%s resetkeys ~redlock:* resetchannels &redlock:wake:* &redlock:{*}:leader -@all " +
	"+evalsha +eval +get +set +pttl +pexpire +del +publish +exists +time +zadd +zrange +zscore +zrem +zcount +zremrangebyscore +info +subscribe +unsubscribe +ping +hello"

// certs writes a CA and a server certificate for 127.0.0.1, signed by it,
// into dir, and returns the CA pool for clients.
func certs(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", "CERTIFICATE", caDER)
	write("server.crt", "CERTIFICATE", srvDER)
	write("server.key", "EC PRIVATE KEY", keyDER)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return pool
}

// tlsNode is a redis-server with a TLS port (besides the plain one the
// harness checks readiness and administers it on).
type tlsNode struct {
	*Node
	TLSAddr string
}

func startTLSNodes(t *testing.T, n int) ([]tlsNode, *x509.CertPool) {
	t.Helper()
	bin := needProcesses(t, "servers with TLS")
	dir := t.TempDir()
	pool := certs(t, dir)
	nodes := make([]tlsNode, n)
	for i := range nodes {
		p := freePort(t)
		nodes[i] = tlsNode{startProcess(t, bin, 0, "--tls-port", fmt.Sprint(p),
			"--tls-cert-file", filepath.Join(dir, "server.crt"), "--tls-key-file", filepath.Join(dir, "server.key"),
			"--tls-ca-cert-file", filepath.Join(dir, "ca.crt"), "--tls-auth-clients", "no"), fmt.Sprintf("127.0.0.1:%d", p)}
	}
	return nodes, pool
}

// setUser creates an ACL user on n from a rule with %s for the password.
func setUser(t *testing.T, n *Node, user, rule string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", user}
	for _, f := range strings.Fields(fmt.Sprintf(rule, "pw-"+user)) {
		args = append(args, f)
	}
	if err := Admin(t, n).Do(t.Context(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", user, err)
	}
}

// tlsClients connects to the nodes' TLS ports as user.
func tlsClients(t *testing.T, nodes []tlsNode, pool *x509.CertPool, users []string) []redis.UniversalClient {
	t.Helper()
	out := make([]redis.UniversalClient, len(nodes))
	for i, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.TLSAddr, Username: users[i], Password: "pw-" + users[i],
			TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, DialerRetries: 1})
		t.Cleanup(func() { _ = c.Close() })
		out[i] = c
	}
	return out
}

// TestTLSAndACL: every operation the library has (lock, fencing, extend,
// inspect, the release notices a waiter subscribes to, unlock) works over
// TLS for a user limited by aclLine to the lock's keys and channels.
func TestTLSAndACL(t *testing.T) {
	nodes, pool := startTLSNodes(t, 3)
	users := []string{"locker", "locker", "locker"}
	for _, n := range nodes {
		setUser(t, n.Node, "locker", aclLine)
	}
	plain := []*Node{nodes[0].Node, nodes[1].Node, nodes[2].Node}
	key := UniqueKey(t, plain)
	a := newClient(t, tlsClients(t, nodes, pool, users), redlock.WithFencing())
	b := newClient(t, tlsClients(t, nodes, pool, users), redlock.WithFencing())
	l, err := a.TryLock(t.Context(), key, redlock.WithMetadata("over TLS"), redlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() == 0 {
		t.Fatal("no fencing token")
	}
	if err := l.Extend(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	s, err := a.Inspect(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if _, meta, ok := s.Holder(); !ok || meta != "over TLS" {
		t.Fatalf("inspect: %+v", s)
	}
	got := waitFor(t, b, key) // b waits, subscribed to the release notices
	waitSubscribed(t, plain...)
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // the holder's TTL would wake it at 60 s
		t.Fatal("the waiter was not woken: the release notices did not reach it over TLS")
	}
	// An election: a leader announced, observed and read back.
	ea, err := a.Election(key)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := b.Election(key)
	if err != nil {
		t.Fatal(err)
	}
	seen := eb.Observe(t.Context())
	ld, err := ea.Campaign(t.Context(), "leader over TLS")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-seen:
		if got.Term != ld.Term() || got.Value != "leader over TLS" {
			t.Fatalf("observed %+v, want term %d", got, ld.Term())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the observer saw no leader")
	}
	if err := ld.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A multi-key lock, a read-write lock's two sides, and Inspect.
	m, err := a.MultiLock([]string{key + ":x", key + ":y"}, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	ml, err := m.TryLock(t.Context())
	if err != nil {
		t.Fatalf("multi-key lock: %v", err)
	}
	if err := ml.Extend(t.Context(), time.Minute); err != nil {
		t.Fatalf("multi-key extend: %v", err)
	}
	if err := ml.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	rw, err := a.RWMutex(key, redlock.WithFencing())
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.TryRLock(t.Context())
	if err != nil {
		t.Fatalf("reader: %v", err)
	}
	if _, err := rw.Inspect(t.Context()); err != nil {
		t.Fatalf("inspect: %v", err)
	}
	if err := r.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	w, err := rw.Lock(t.Context())
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	if err := w.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The plain port, and a key outside redlock:*, are refused to the user.
	other := redis.NewClient(&redis.Options{Addr: nodes[0].TLSAddr, Username: "locker", Password: "pw-locker",
		TLSConfig: &tls.Config{RootCAs: pool}, DialerRetries: 1})
	defer other.Close()
	if err := other.Set(t.Context(), "not-a-lock", "x", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SET outside the lock's keys: got %v, want NOPERM", err)
	}
}

// TestElectionWithoutLeaderChannel: a user that may not publish on the
// leader channels can hold locks, but a Campaign fails at once with
// ErrUnusable naming the permission, and writes nothing.
func TestElectionWithoutLeaderChannel(t *testing.T) {
	nodes, pool := startTLSNodes(t, 3)
	for _, n := range nodes {
		setUser(t, n.Node, "nochannel", strings.Replace(aclLine, " &redlock:{*}:leader ", " ", 1))
	}
	plain := []*Node{nodes[0].Node, nodes[1].Node, nodes[2].Node}
	key := UniqueKey(t, plain)
	c := newClient(t, tlsClients(t, nodes, pool, []string{"nochannel", "nochannel", "nochannel"}))
	e, err := c.Election(key)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err = e.Campaign(ctx, "v")
	if !errors.Is(err, redlock.ErrUnusable) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "ACL") {
		t.Fatalf("Campaign without the leader channel: got %v, want ErrUnusable naming the ACL", err)
	}
	// The won lock was given back (the last node's release may still be
	// on its way when Campaign returns).
	waitUntil(t, 10*time.Second, "no node holds the election after the refused campaign", func() bool {
		for _, n := range plain {
			if v, _ := Admin(t, n).Get(t.Context(), RedisKey("election:"+key)).Result(); v != "" {
				return false
			}
		}
		return true
	})
}

// TestACLMissingPermission: a node whose user lacks a command the scripts
// need fails with the server's permission error and grants nothing; the
// other nodes decide, and without a majority the lock is refused, and a
// Lock stops waiting at once (ErrUnusable).
func TestACLMissingPermission(t *testing.T) {
	nodes, pool := startTLSNodes(t, 3)
	for _, n := range nodes {
		setUser(t, n.Node, "locker", aclLine)
		setUser(t, n.Node, "noset", strings.Replace(aclLine, " +set ", " ", 1))
	}
	plain := []*Node{nodes[0].Node, nodes[1].Node, nodes[2].Node}
	key := UniqueKey(t, plain)
	c := newClient(t, tlsClients(t, nodes, pool, []string{"noset", "locker", "locker"}))
	l, err := c.TryLock(t.Context(), key)
	if err != nil {
		t.Fatalf("two good nodes of three: %v", err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
	c2 := newClient(t, tlsClients(t, nodes, pool, []string{"noset", "noset", "locker"}))
	_, err = c2.TryLock(t.Context(), key)
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &qe) || !strings.Contains(err.Error(), "can't run this command") {
		t.Fatalf("got %v, want ErrNotObtained naming the missing permission", err)
	}
	// Lock does not wait for a majority that cannot be: it stops at once.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := c2.Lock(ctx, key); !errors.Is(err, redlock.ErrUnusable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with two nodes refusing a command: got %v, want ErrUnusable", err)
	}
	for _, n := range plain[:2] { // the nodes without SET
		if k, _ := Admin(t, n).Exists(t.Context(), RedisKey(key)).Result(); k != 0 {
			t.Fatalf("%s holds a key after the refusal: a false grant", n.Addr)
		}
	}
	// The third node's grant, if it came after the refusal was decided, is
	// taken back in the background.
	waitEmpty(t, plain, key, 30*time.Second)
}
