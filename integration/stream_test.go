package integration

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	"github.com/stretchr/testify/require"
)

// Tests of the node streams (stream.go): how commands leave for a node.
// Each builds its schedule by freezing the node (SIGSTOP) while calls are
// made, and waits for events (goroutines parked in the fan-out, calls
// returning), never for time to pass.

// infoField reads a numeric field of INFO section on n.
func infoField(t *testing.T, admin *redis.Client, section, field string) int64 {
	t.Helper()
	n, err := readInfoField(t.Context(), admin, section, field)
	require.NoError(t, err)
	return n
}

// readInfoField is infoField for any goroutine: it returns what went wrong.
func readInfoField(ctx context.Context, admin *redis.Client, section, field string) (int64, error) {
	info, err := admin.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no %s", section, field)
}

// calls reads how many times the server behind admin ran cmd.
func calls(t *testing.T, admin *redis.Client, cmd string) int64 {
	t.Helper()
	return int64(commandStat(t, admin, "calls")[cmd])
}

// waitInFanOut waits until n goroutines are waiting in the library's
// fan-out: their calls have been handed to the nodes' streams.
func waitInFanOut(t *testing.T, n int) {
	t.Helper()
	buf := make([]byte, 1<<22)
	waitUntil(t, 30*time.Second, fmt.Sprintf("%d calls waiting in the fan-out", n), func() bool {
		return strings.Count(string(buf[:runtime.Stack(buf, true)]), "redlock.fanOut(") >= n
	})
}

// TestConcurrentCallsShareAWrite: calls made while a node's previous
// command is in flight leave together, as one pipeline, which the node
// reads in one go. 32 TryLocks on different keys are made while the node is
// frozen with the first one's command in flight; after it resumes, it
// processes far fewer reads than commands, and every TryLock succeeds.
func TestConcurrentCallsShareAWrite(t *testing.T) {
	nodes := StartNodes(t, 1)
	needsOwnServers(t, nodes[0])
	admin := Admin(t, nodes[0])
	c := newClient(t, Clients(t, nodes, nil), redlock.WithAnyNodeCount(), redlock.WithNodeTimeout(time.Minute))
	warm(t, c)
	const k = 32
	before := infoField(t, admin, "stats", "total_reads_processed")
	nodes[0].Pause(t)
	t.Cleanup(func() { nodes[0].Resume(t) })
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			l, err := c.TryLock(t.Context(), fmt.Sprintf("%s-%d", t.Name(), i))
			if err == nil {
				err = l.Unlock(context.WithoutCancel(t.Context()))
			}
			errs[i] = err
		})
	}
	waitInFanOut(t, k)
	nodes[0].Resume(t)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	// 32 acquires and 32 releases, plus at most a ping and an INFO on a
	// fresh connection and this test's own INFO calls; one read per
	// command would be at least 64.
	reads := infoField(t, admin, "stats", "total_reads_processed") - before
	t.Logf("%d reads for %d commands", reads, 2*k)
	require.Less(t, reads, int64(k), "the node read the commands one by one: they were not batched")
}

// TestEndedCallsAreNotSent: calls that wait behind a frozen node past
// their round's deadline are dropped, never sent: when the node resumes it
// runs only the acquire that was in flight when it froze (and the release
// of that late grant).
func TestEndedCallsAreNotSent(t *testing.T) {
	nodes := StartNodes(t, 1)
	needsOwnServers(t, nodes[0])
	admin := Admin(t, nodes[0])
	c := newClient(t, Clients(t, nodes, nil), redlock.WithAnyNodeCount(), redlock.WithNodeTimeout(100*time.Millisecond))
	warm(t, c)
	before := calls(t, admin, "evalsha")
	nodes[0].Pause(t)
	t.Cleanup(func() { nodes[0].Resume(t) })
	const k = 10
	for i := range k { // each waits its node timeout, then fails
		_, err := c.TryLock(t.Context(), fmt.Sprintf("%s-%d", t.Name(), i))
		require.ErrorIs(t, err, redlock.ErrNotObtained)
	}
	nodes[0].Resume(t)
	// The first acquire was on the wire: it runs, and its grant comes back
	// late and is released.
	waitEmpty(t, nodes, fmt.Sprintf("%s-0", t.Name()), 30*time.Second)
	ran := calls(t, admin, "evalsha") - before
	require.LessOrEqual(t, ran, int64(2), "%d scripts ran: calls whose deadline had passed were sent", ran)
	for i := 1; i < k; i++ {
		n, err := admin.Exists(t.Context(), RedisKey(fmt.Sprintf("%s-%d", t.Name(), i))).Result()
		require.NoError(t, err)
		require.Zero(t, n, "key %d exists: its acquire was sent after its deadline", i)
	}
}

// TestNoReplayAfterReadTimeout: a script whose reply times out is not sent
// again on a new connection. The node is frozen with an acquire in flight
// and go-redis's read timeout is short; when the node resumes, the acquire
// has run at most once.
func TestNoReplayAfterReadTimeout(t *testing.T) {
	nodes := StartNodes(t, 1)
	needsOwnServers(t, nodes[0])
	admin := Admin(t, nodes[0])
	short := func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond }
	c := newClient(t, Clients(t, nodes, short), redlock.WithAnyNodeCount(), redlock.WithNodeTimeout(time.Minute))
	warm(t, c)
	before := calls(t, admin, "evalsha")
	streamConns := clientIDs(t, admin) // the stream's connection, taken by warm
	nodes[0].Pause(t)
	t.Cleanup(func() { nodes[0].Resume(t) })
	_, err := c.TryLock(t.Context(), t.Name())
	require.ErrorIs(t, err, redlock.ErrNotObtained) // the read timed out
	nodes[0].Resume(t)
	// The node reads what was buffered on the connection the client gave
	// up on, then its end, and drops it; only then is the count final.
	waitUntil(t, 30*time.Second, "the timed-out connection to be dropped", func() bool {
		now := clientIDs(t, admin)
		for id := range streamConns {
			if now[id] {
				return false
			}
		}
		return true
	})
	warm(t, c) // and the Client works on a new connection
	ran := calls(t, admin, "evalsha") - before
	require.LessOrEqual(t, ran, int64(3), "%d scripts ran: the timed-out acquire was sent again", ran) // it, and warm's two
}

// clientIDs returns the ids of the node's client connections but admin's.
func clientIDs(t *testing.T, admin *redis.Client) map[string]bool {
	t.Helper()
	self, err := admin.ClientID(t.Context()).Result()
	require.NoError(t, err)
	list, err := admin.ClientList(t.Context()).Result()
	require.NoError(t, err)
	ids := map[string]bool{}
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
		if id != strconv.FormatInt(self, 10) {
			ids[id] = true
		}
	}
	return ids
}

// TestRunIDAskedOncePerConnection: the restart guard learns a node's run_id
// once per connection, not once per acquire.
func TestRunIDAskedOncePerConnection(t *testing.T) {
	nodes := StartNodes(t, 1)
	admin := Admin(t, nodes[0])
	c := newClient(t, Clients(t, nodes, nil), redlock.WithAnyNodeCount())
	before := calls(t, admin, "info")
	const cycles = 200
	for i := range cycles {
		l, err := c.Lock(t.Context(), fmt.Sprintf("%s-%d", t.Name(), i))
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
	}
	// One per connection taken: one here, more only if the machine
	// stalled this loop for 5 seconds (the stream gives its connection back
	// when idle) or it ran past the stream's connection age.
	asked := calls(t, admin, "info") - before - 1 // this test's own
	t.Logf("INFO server asked %d times in %d acquires", asked, cycles)
	require.Less(t, asked, int64(cycles/10))
}

// TestStreamGivesUpAtDeadline: with ContextTimeoutEnabled, a node that stops
// answering holds its stream no longer than the calls on the wire would
// wait, even when go-redis's read timeout is off: Close, which waits for the
// streams' writers, returns without error while the node is still frozen.
// The nodes are near, or 5 ms away behind proxies, where a stream has
// lanes: one opened to the frozen node readies no longer than its calls
// would wait, and carries none.
func TestStreamGivesUpAtDeadline(t *testing.T) {
	for _, far := range []bool{false, true} {
		t.Run(map[bool]string{false: "near", true: "far"}[far], func(t *testing.T) {
			nodes := StartNodes(t, 3)
			needsOwnServers(t, nodes[0])
			key := UniqueKey(t, nodes)
			reach := nodes
			if far {
				proxies := ProxyNodes(t, nodes)
				for _, p := range proxies {
					p.Latency(t, 5, 0)
				}
				reach = Reach(proxies)
			}
			patient := func(o *redis.Options) { o.ReadTimeout, o.ContextTimeoutEnabled = -1, true }
			c, err := redlock.New(Clients(t, reach, patient), redlock.WithNodeTimeout(100*time.Millisecond))
			require.NoError(t, err)
			warm(t, c)
			nodes[2].Pause(t)
			t.Cleanup(func() { nodes[2].Resume(t) })
			for range 3 {
				l, err := c.Lock(t.Context(), key)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(t.Context()))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			require.NoError(t, c.Close(ctx), "a writer stayed stuck on the frozen node")
		})
	}
}

// TestLanesSendWhileABatchIsOut: while a batch is out on a far node, a
// call on another key leaves on another lane of the node's stream, on a
// connection of its own, where with one pipeline in flight per node it
// waited for the batch's reply (internal/nodeio/stream.go). The node is
// 5 ms away (a proxy), so far; it holds back every write (CLIENT PAUSE
// WRITE) but answers the lane's readying INFO, so both acquires wait on
// it at once, on two connections (blocked_clients), and both hold once it
// lets them run. Which calls a lane may take, each key's order, and which
// nodes are far are internal/nodeio's TestTakeKeepsEachKeysOrder and
// TestLanesOnlyForFarNodes.
func TestLanesSendWhileABatchIsOut(t *testing.T) {
	nodes := StartNodes(t, 1)
	needsOwnServers(t, nodes[0])
	proxies := ProxyNodes(t, nodes)
	proxies[0].Latency(t, 5, 0)
	c := newClient(t, Clients(t, Reach(proxies), readmeNodes), redlock.WithAnyNodeCount(), redlock.WithTTL(10*time.Minute))
	warm(t, c)
	admin := Admin(t, nodes[0])
	blocked := func() int64 { return infoField(t, admin, "clients", "blocked_clients") }
	require.NoError(t, admin.Do(t.Context(), "client", "pause", 60_000, "write").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "client", "unpause").Err() })
	try := func(key string) chan error {
		r := make(chan error, 1)
		go func() {
			l, err := c.TryLock(context.Background(), key)
			if err == nil {
				err = l.Unlock(context.Background())
			}
			r <- err
		}()
		return r
	}
	first := try(UniqueKey(t, nodes))
	waitUntil(t, 10*time.Second, "the first acquire to wait on the node", func() bool { return blocked() == 1 })
	other := try(UniqueKey(t, nodes))
	waitUntil(t, 10*time.Second, "the second acquire to wait on the node beside the first", func() bool { return blocked() == 2 })
	require.NoError(t, admin.Do(t.Context(), "client", "unpause").Err())
	require.NoError(t, <-first)
	require.NoError(t, <-other)
}
