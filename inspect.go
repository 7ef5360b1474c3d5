package redlock

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// NodeState is what one node says about a key.
type NodeState struct {
	Node string // the node's address, or "node N"
	Held bool   // the key exists on this node
	// Holder names the holder without revealing its token: the first 12
	// hex digits of the token's SHA-256, the same on every node.
	Holder   string
	Token    string        // the holder's token, only when Inspect was given it with WithToken
	Metadata string        // the holder's metadata, when held
	TTL      time.Duration // the key's remaining TTL on this node; −1 if it has none
	Fence    uint64        // the key's fence counter on this node (WithFencing); 0 if none
	// Waiting is how many Lock calls wait for the key in its queue on this
	// node (places whose lease has not lapsed), and FirstWaiter the ID of
	// the first of them ("" if none): its Client's ID, a dot, and a
	// number (see [WithWaiterLease]).
	Waiting     int
	FirstWaiter string
	// WaitingReaders is how many of those are readers of a read-write
	// lock ([RWMutex.RLock]), among the first 64 places; the others wait
	// to write. Readers and writers wait in one queue, in the order they
	// came.
	WaitingReaders int
	// Readers is how many readers hold the read side of a read-write lock
	// ([Client.RWMutex]) on this node (leases not lapsed).
	Readers int
	Err     error // the node's error; the other fields are then empty
}

// KeyState is what every node says about a key, from [Client.Inspect].
type KeyState struct {
	Nodes []NodeState // in node order
}

// Holder returns the holder that a majority of nodes name, with its
// metadata, and whether there is one. When fewer than a majority answered,
// there is none, whatever the other nodes hold.
func (s *KeyState) Holder() (holder, metadata string, ok bool) {
	counts := make(map[string]int)
	for _, n := range s.Nodes {
		if n.Held {
			counts[n.Holder]++
			if counts[n.Holder] >= quorum(len(s.Nodes)) {
				return n.Holder, n.Metadata, true
			}
		}
	}
	return "", "", false
}

// Remaining returns how long the majority holder keeps the lock unless it
// extends or releases it: the time until fewer than a majority of nodes
// still hold its key, as the nodes' TTLs say. It is 0 when no holder has a
// majority, and math.MaxInt64 when a majority holds keys without TTL.
func (s *KeyState) Remaining() time.Duration {
	holder, _, ok := s.Holder()
	if !ok {
		return 0
	}
	var ttls []time.Duration
	for _, n := range s.Nodes {
		if n.Held && n.Holder == holder {
			t := n.TTL
			if t < 0 {
				t = math.MaxInt64
			}
			ttls = append(ttls, t)
		}
	}
	// The quorum-th longest TTL: after it, fewer than a majority hold.
	slices.Sort(ttls)
	return ttls[len(ttls)-quorum(len(s.Nodes))]
}

// Inspect asks every node what it holds at key: the holder (named without
// its token), its metadata, the remaining TTL, the fence counter and the
// wait queue, or the node's error. It changes nothing. Tokens are shown only to a holder
// that passes its own with [WithToken], on the nodes that hold it. The
// error is non-nil only for an invalid key or option, a Client that is
// closed, or a ctx that is already done; node failures are reported per
// node. A node that does not answer costs at most the node timeout.
func (c *Client) Inspect(ctx context.Context, key string, opts ...Option) (*KeyState, error) {
	lc, err := c.callConfig(key, toInspect, opts)
	if err != nil {
		return nil, err
	}
	states, err := c.inspect(ctx, []string{key}, lc.token)
	if err != nil {
		return nil, err
	}
	return states[0], nil
}

// inspect asks every node about each of keys (a semaphore's slots, a
// multi-key lock's keys) at once: each node is sent every key's inspection
// in one batch, so however many keys, a node that does not answer costs
// one node timeout. token, if not "", is shown where it holds.
func (c *Client) inspect(ctx context.Context, keys []string, token string) ([]*KeyState, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	reqs := make([]request, len(keys))
	for j, k := range keys {
		reqs[j] = request{op: wire.NewOp(wire.OpInspect, c.redisKey(k), "", "", 0), nodes: c.nodes, need: len(c.nodes), timeout: c.nodeTimeout(c.cfg.lock.ttl)}
	}
	states := make([]*KeyState, len(keys))
	for j, r := range fanOutAll(ctx, reqs) {
		r.finish(&c.bg, nil)
		states[j] = c.keyState(r, token)
	}
	return states, nil
}

// keyState is what an inspection round r found.
func (c *Client) keyState(r *round, token string) *KeyState {
	s := &KeyState{Nodes: make([]NodeState, len(c.nodes))}
	for i, res := range r.results {
		d := res.Details()
		st := NodeState{Node: c.nodes[i].Name(), Err: res.Err, Fence: uint64(res.Fence), Waiting: int(d.Waiting), FirstWaiter: res.Head, WaitingReaders: int(d.WaitingReaders), Readers: int(d.Readers)}
		if res.Status == wire.StatusHeld {
			var holder string
			st.Held, st.TTL = true, res.PTTL
			holder, st.Metadata, _ = strings.Cut(res.Value, "\x00")
			st.Holder = holderID(holder)
			if token != "" && holder == token {
				st.Token = holder
			}
		}
		s.Nodes[i] = st
	}
	return s
}

// holderID names a token's holder without revealing the token.
func holderID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:6])
}
