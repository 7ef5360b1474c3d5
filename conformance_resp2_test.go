package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/redistest"
)

// TestConformanceRESP2: every script reply of the conformance table
// reaches the library as the same Go value whether the node's go-redis
// client speaks RESP3 (go-redis's default) or RESP2 (Options.Protocol 2,
// and go-redis's fallback where HELLO 3 fails): internal/wire decodes
// one shape. Redis converts a script's reply to the connection's
// protocol, and the two differ where RESP3 has a type RESP2 has not (a
// double, a map, a set, a boolean, once a script asks for RESP3 replies
// with redis.setresp(3)), so a script that returned one would decode
// differently for some users. Raw steps (the table's own reads of the
// keys, not the library's) run too, to keep the two servers' states
// alike, but are not compared: a score is a double in one protocol and a
// string in the other.
//
// The same sequence runs on two servers at once, one per protocol;
// durations may differ by the milliseconds between the two runs of a step.
func TestConformanceRESP2(t *testing.T) {
	servers := redistest.Start(t, 2)
	clients := make([]*redis.Client, 2)
	for i, proto := range []int{3, 2} {
		clients[i] = redis.NewClient(&redis.Options{Addr: servers[i].Addr, Protocol: proto})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	ctx := t.Context()
	// The two connections do speak different protocols (or this test
	// would compare one protocol with itself).
	for i, c := range clients {
		info, err := c.Do(ctx, "CLIENT", "INFO").Text()
		if want := []string{"resp=3", "resp=2"}[i]; err != nil || !slices.Contains(strings.Fields(info), want) {
			t.Fatalf("CLIENT INFO of the connection meant to speak %s: %q, %v", want, info, err)
		}
	}
	// And the comparison tells such replies apart: a score, read by a
	// script that asked for RESP3 replies.
	var score [2]any
	for i, c := range clients {
		score[i], _ = c.Eval(ctx, "redis.call('ZADD', KEYS[1], 1.5, 'm') redis.setresp(3) return redis.call('ZSCORE', KEYS[1], 'm')", []string{"conf:resp"}).Result()
	}
	if sameProtocolReply(score[1], score[0], 0) {
		t.Fatalf("a script's RESP3 score read %#v in RESP2 and %#v in RESP3: the comparison cannot tell them apart", score[1], score[0])
	}
	compared := 0
	for name, seq := range conformance() {
		t.Run(name, func(t *testing.T) {
			var apart time.Duration
			for i, w := range seq {
				args := w.args()
				var replies [2]any
				start := time.Now()
				for j, c := range clients {
					r, err := c.Do(ctx, args...).Result()
					if err != nil && !errors.Is(err, redis.Nil) {
						r = err.Error()
					}
					replies[j] = r
				}
				apart = max(apart, time.Since(start))
				if w.o == nil {
					continue
				}
				compared++
				if !sameProtocolReply(replies[1], replies[0], (50*time.Millisecond + 2*apart).Milliseconds()) {
					t.Errorf("step %d (%v): RESP2 %#v, RESP3 %#v", i, w, replies[1], replies[0])
				}
			}
		})
	}
	t.Logf("%d script replies compared", compared)
}

// sameProtocolReply compares two go-redis decodings of one reply: the same
// Go types and values, but durations within slack ms (sameInt).
func sameProtocolReply(got, want any, slack int64) bool {
	switch w := want.(type) {
	case int64:
		g, ok := got.(int64)
		return ok && sameInt(g, w, slack)
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameProtocolReply(g[i], w[i], slack) {
				return false
			}
		}
		return true
	}
	return fmt.Sprintf("%T %v", got, got) == fmt.Sprintf("%T %v", want, want)
}
