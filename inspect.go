package redlock

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"
)

// NodeState is what one node says about a key.
type NodeState struct {
	Node     string        // the node's address, or "node N"
	Held     bool          // the key exists on this node
	Token    string        // the holder's token, when held
	Metadata string        // the holder's metadata, when held
	TTL      time.Duration // the key's remaining TTL on this node; −1 if it has none
	Fence    uint64        // the key's fence counter on this node (WithFencing); 0 if none
	Err      error         // the node's error; the other fields are then empty
}

// KeyState is what every node says about a key, from [Client.Inspect].
type KeyState struct {
	Key    string
	Quorum int
	Nodes  []NodeState // in node order
}

// Holder returns the token held by a majority of nodes, with its metadata,
// and whether there is one. When fewer than a majority answered, there is
// none, whatever the other nodes hold.
func (s *KeyState) Holder() (token, metadata string, ok bool) {
	counts := make(map[string]int)
	for _, n := range s.Nodes {
		if n.Held {
			counts[n.Token]++
			if counts[n.Token] >= s.Quorum {
				return n.Token, n.Metadata, true
			}
		}
	}
	return "", "", false
}

// Remaining returns how long the majority holder will keep the lock unless it
// extends or releases it: the time until fewer than a majority of nodes still
// hold its token, as the nodes' TTLs say. It is 0 when no token is held by a
// majority, and math.MaxInt64 when a majority holds keys without TTL.
func (s *KeyState) Remaining() time.Duration {
	token, _, ok := s.Holder()
	if !ok {
		return 0
	}
	var ttls []time.Duration
	for _, n := range s.Nodes {
		if n.Held && n.Token == token {
			t := n.TTL
			if t < 0 {
				t = math.MaxInt64
			}
			ttls = append(ttls, t)
		}
	}
	// The quorum-th longest TTL: after it, fewer than a majority hold.
	slices.Sort(ttls)
	return ttls[len(ttls)-s.Quorum]
}

// Inspect asks every node what it holds at key: holder token and metadata
// and the remaining TTL, or the node's error. It changes nothing. The error
// is non-nil only for an invalid key or a ctx that is already done; node
// failures are reported per node.
func (c *Client) Inspect(ctx context.Context, key string) (*KeyState, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	o := newOp(opInspect, c.redisKey(key), "", "", 0)
	r := fanOut(ctx, c.work, c.nodes, len(c.nodes), c.nodeTimeout(c.cfg.lock.ttl), o, nil, false)
	r.finish(&c.bg, nil)
	s := &KeyState{Key: key, Quorum: c.Quorum(), Nodes: make([]NodeState, len(c.nodes))}
	for i, res := range r.results {
		st := NodeState{Node: c.nodes[i].name(), Err: res.err, Fence: uint64(res.fence)}
		if res.status == statusHeld {
			st.Held, st.TTL = true, res.pttl
			st.Token, st.Metadata, _ = strings.Cut(res.value, "\x00")
		}
		s.Nodes[i] = st
	}
	return s, nil
}
