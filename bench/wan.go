package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// ---- 6: nodes at WAN distances ----

// wanLatencies are the one-way delays added to each of the 5 lock nodes'
// replies, in milliseconds: two near nodes, one a region away, two far.
var wanLatencies = []int{1, 1, 5, 20, 50}

// wanJitter is each node's jitter: ± a fifth of its delay.
func wanJitter(ms int) int { return ms / 5 }

type wanRow struct {
	Name, Lib            string
	Cycles               int
	LockP50, LockP99     time.Duration
	UnlockP50, UnlockP99 time.Duration
}

// wanResult is the WAN measure: each contender's rows, and the round trip
// through each node's proxy (PING), whose third-fastest is what a quorum
// of 3 of 5 waits for.
type wanResult struct {
	Rows           []wanRow
	NodeP50        []time.Duration // by node
	NodeP99        []time.Duration
	ThirdP50       time.Duration // the third-smallest of NodeP50
	ThirdP99       time.Duration // the third-smallest of NodeP99
	Latencies      []int         // ms added per node
	Cycles, Rounds int
	// A PING straight to a node (no proxy), back to back and after a
	// 100 ms pause, p50: what waking idle cores costs this machine.
	WarmP50, PausedP50 time.Duration
	// The hand-off at these distances (wanHandoff): rounds of For per
	// contender, each holding Hold.
	Handoff                 []handoffRow
	HandoffHold, HandoffFor time.Duration
	HandoffRounds           int
	// Concurrent Locks (wanShared): one Client, or one each, rounds of
	// HandoffFor.
	Shared []wanSharedRow
}

// wanHold is how long each holder holds the key in the WAN hand-off: longer
// than a majority's round trip (the third-fastest node's, about 5 ms), so
// that the waiters are asleep between their tries when the holder
// releases, as they are when the work outlasts the network.
const wanHold = 30 * time.Millisecond

// wanHandoff is the contention measure (section 3's) through the proxies:
// a hand-off between processes is two rounds there (the release, whose
// notices wake the first waiter, then its attempt), one between Lock calls
// of one Client (the hand-over sends the attempt in the release's batch).
func wanHandoff(ctx context.Context, e *env, addrs []string, rounds int, d time.Duration, res *wanResult) error {
	cs := []contended{
		{contender: redlockContender(5, ""), Hold: wanHold},
		{contender: redlockContender(5, ""), Hold: wanHold, Shared: true},
	}
	via := *e
	via.via = addrs
	ho, err := measureContention(ctx, &via, cs, rounds, d)
	if err != nil {
		return err
	}
	res.Handoff, res.HandoffHold, res.HandoffFor, res.HandoffRounds = summarizeHandoff(cs, ho), wanHold, d, rounds
	return nil
}

// proxies puts an in-process toxiproxy in front of each lock node, with
// latency ms ± jitter on the node's replies, and returns their addresses
// and a stop function.
func proxies(e *env, ms []int) ([]string, func(), error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	var started []*toxiproxy.Proxy
	stop := func() {
		for _, p := range started {
			p.Stop()
		}
	}
	addrs := make([]string, len(ms))
	for i, d := range ms {
		p := toxiproxy.NewProxy(server, fmt.Sprintf("wan%d", i), "127.0.0.1:0", e.nodes[i].Addr)
		if err := p.Start(); err != nil {
			stop()
			return nil, nil, err
		}
		started = append(started, p)
		toxic := fmt.Sprintf(`{"name":"wan","type":"latency","stream":"downstream","attributes":{"latency":%d,"jitter":%d}}`, d, wanJitter(d))
		if _, err := p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
			stop()
			return nil, nil, err
		}
		addrs[i] = p.Listen
	}
	return addrs, stop, nil
}

// measureWAN runs every contender on 5 nodes behind proxies with
// wanLatencies: rounds × cycles Lock+Unlock cycles on fresh keys,
// interleaved, timing Lock and Unlock apart; then redlock's hand-off
// there, rounds of handoffFor per contender (wanHandoff).
func measureWAN(ctx context.Context, e *env, cs []contender, rounds, cycles int, handoffFor time.Duration) (wanResult, error) {
	res := wanResult{Latencies: wanLatencies, Cycles: cycles, Rounds: rounds}
	addrs, stop, err := proxies(e, wanLatencies)
	if err != nil {
		return res, err
	}
	defer stop()
	build := func(c contender) (instance, error) {
		in, err := c.build(addrs, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		return in, nil
	}
	insts, err := warmed(ctx, cs, build, 5, "wan")
	defer closeAll(insts)
	if err != nil {
		return res, err
	}
	locks := make([][]time.Duration, len(cs))
	unlocks := make([][]time.Duration, len(cs))
	pings := make([][]time.Duration, len(addrs))
	for r := range rounds {
		if err := pingAll(ctx, addrs, pings); err != nil {
			return res, err
		}
		for _, i := range roundOrder(len(insts), r) {
			in := insts[i]
			for j := range cycles {
				l, u, err := wanCycle(ctx, in, fmt.Sprintf("bench:wan:%d:%d:%d", i, r, j))
				if err != nil {
					return res, fmt.Errorf("%s: %w", cs[i].Name, err)
				}
				locks[i], unlocks[i] = append(locks[i], l), append(unlocks[i], u)
			}
		}
	}
	if err := wanHandoff(ctx, e, addrs, rounds, handoffFor, &res); err != nil {
		return res, fmt.Errorf("hand-off: %w", err)
	}
	if err := wanShared(ctx, addrs, rounds, handoffFor, &res); err != nil {
		return res, fmt.Errorf("concurrent Locks: %w", err)
	}
	if err := e.released(ctx); err != nil {
		return res, err
	}
	for i, c := range cs {
		l, u := sorted(locks[i]), sorted(unlocks[i])
		res.Rows = append(res.Rows, wanRow{Name: c.Name, Lib: c.Lib, Cycles: len(l),
			LockP50: pct(l, 0.5), LockP99: pct(l, 0.99), UnlockP50: pct(u, 0.5), UnlockP99: pct(u, 0.99)})
	}
	for _, p := range pings {
		s := sorted(p)
		res.NodeP50, res.NodeP99 = append(res.NodeP50, pct(s, 0.5)), append(res.NodeP99, pct(s, 0.99))
	}
	third := func(ds []time.Duration) time.Duration { s := slices.Clone(ds); slices.Sort(s); return s[2] }
	res.ThirdP50, res.ThirdP99 = third(res.NodeP50), third(res.NodeP99)
	res.WarmP50, res.PausedP50, err = wakeCost(ctx, e.nodes[0].Addr)
	return res, err
}

// wanCycle locks key and unlocks it, and times the two apart.
func wanCycle(ctx context.Context, in instance, key string) (lock, unlock time.Duration, err error) {
	start := time.Now()
	release, err := in.lock(ctx, key)
	if err != nil {
		return 0, 0, err
	}
	locked := time.Now()
	if err := release(ctx); err != nil {
		return 0, 0, fmt.Errorf("unlock: %w", err)
	}
	return locked.Sub(start), time.Since(locked), nil
}

// wakeCost times 20 PINGs to addr back to back, then 20 each after a
// 100 ms pause, on one warm connection, and returns the two p50s.
func wakeCost(ctx context.Context, addr string) (warm, paused time.Duration, err error) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	var ds [2][]time.Duration // back to back, after a pause
	for j, pause := range []time.Duration{0, 100 * time.Millisecond} {
		if err := rc.Ping(ctx).Err(); err != nil {
			return 0, 0, err
		}
		for range 20 {
			time.Sleep(pause)
			start := time.Now()
			if err := rc.Ping(ctx).Err(); err != nil {
				return 0, 0, err
			}
			ds[j] = append(ds[j], time.Since(start))
		}
	}
	return pct(sorted(ds[0]), 0.5), pct(sorted(ds[1]), 0.5), nil
}

// pingAll times 20 PINGs through each address, each on a warm connection.
func pingAll(ctx context.Context, addrs []string, out [][]time.Duration) error {
	for i, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a})
		if err := rc.Ping(ctx).Err(); err != nil {
			rc.Close()
			return err
		}
		for range 20 {
			start := time.Now()
			if err := rc.Ping(ctx).Err(); err != nil {
				rc.Close()
				return err
			}
			out[i] = append(out[i], time.Since(start))
		}
		rc.Close()
	}
	return nil
}
