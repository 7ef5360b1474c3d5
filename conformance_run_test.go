package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock/internal/memnode"
	"github.com/redlock-go/redlock/internal/redistest"
)

// The conformance table (conformance_test.go) run against redis-server
// and the in-memory node, and how their replies are compared.

// TestConformance: the in-memory node answers every step of every
// sequence as redis-server does, and publishes the same messages.
func TestConformance(t *testing.T) {
	server := redistest.Start(t, 1)[0]
	rc := redis.NewClient(&redis.Options{Addr: server.Addr})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := t.Context()
	sub := rc.PSubscribe(ctx, "*")
	t.Cleanup(func() { _ = sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := sub.Channel()
	mem := memnode.New()
	var memMsgs []string
	mem.Subscribe("*", func(ch, payload string) { memMsgs = append(memMsgs, ch+" "+payload) })
	for name, seq := range conformance() {
		t.Run(name, func(t *testing.T) {
			// A TTL set at one step and read at another differs between
			// the two nodes by how far apart their runs of those steps
			// were: a few µs, but more on a loaded machine (63 ms once
			// under CI, beside a CPU hog). The slack grows with the widest
			// such gap seen in the sequence.
			var apart time.Duration
			for i, w := range seq {
				args := w.args()
				start := time.Now()
				want, err := rc.Do(ctx, args...).Result()
				if err != nil && !errors.Is(err, redis.Nil) {
					want = err
				}
				got := mem.Do(args...)
				apart = max(apart, time.Since(start))
				t.Logf("step %d (%v): %#v", i, w, want)
				if !sameReply(got, want, (50*time.Millisecond + 2*apart).Milliseconds()) {
					t.Errorf("step %d (%v): memnode %#v, redis-server %#v", i, w, got, want)
				}
				// The messages the step published: up to a marker.
				rc.Publish(ctx, "conf:marker", "")
				var published []string
				for m := range msgs {
					if m.Channel == "conf:marker" {
						break
					}
					published = append(published, m.Channel+" "+m.Payload)
				}
				if published != nil {
					t.Logf("step %d published %q", i, published)
				}
				if fmt.Sprint(memMsgs) != fmt.Sprint(published) {
					t.Errorf("step %d (%v) published: memnode %q, redis-server %q", i, w, memMsgs, published)
				}
				memMsgs = nil
			}
		})
	}
}

// sameReply compares a memnode reply with go-redis's decoding of
// redis-server's: the same shape and values, errors by their code and
// text up to Redis's " script:" suffix, and durations (integers from 100 to
// 10^6 in magnitude) within slack ms.
func sameReply(got, want any, slack int64) bool {
	switch w := want.(type) {
	case error:
		g, ok := got.(memnode.Error)
		wt, _, _ := strings.Cut(w.Error(), " script:")
		gt, _, _ := strings.Cut(string(g), " script:")
		return ok && (gt == wt || strings.HasPrefix(wt, gt) && strings.Fields(gt)[0] == strings.Fields(wt)[0])
	case int64:
		g, ok := got.(int64)
		return ok && sameInt(g, w, slack)
	case float64: // a score: go-redis reads redis-server's RESP3 double; memnode answers as RESP2 (and Lua) does
		g, ok := got.(string)
		f, err := strconv.ParseFloat(g, 64)
		return ok && err == nil && f == w
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !sameReply(g[i], w[i], slack) {
				return false
			}
		}
		return true
	}
	return got == want
}

// sameInt compares two integer replies: equal, or both durations
// (integers from 100 to 10^6 in magnitude) within slack ms.
func sameInt(g, w, slack int64) bool {
	abs := func(x int64) int64 { return max(x, -x) }
	duration := abs(w) >= 100 && abs(w) <= 1e6 && abs(g) >= 100 && abs(g) <= 1e6
	return g == w || duration && abs(g-w) <= slack
}
