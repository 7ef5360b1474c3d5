package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// A contender is one library in one configuration. Each instance it builds
// has its own go-redis clients (with the options its library's docs give:
// redlock's README options, go-redis's defaults for the others), so
// instances behave like separate processes.
type contender struct {
	Name  string // as printed: "redlock, 5 nodes"
	Lib   string // floor, redislock, redsync, redlock (the chart's colour)
	Nodes int
	build func(addrs []string, failed *atomic.Int64) (instance, error)
}

// An instance is a contender set up on its nodes.
type instance interface {
	// cycle locks key and unlocks it: the uncontended measure.
	cycle(ctx context.Context, key string) error
	// lock waits for key as the library's retry policy allows, and returns
	// the unlock. Every failed try adds one to the failed counter given to
	// build, when there is one.
	lock(ctx context.Context, key string) (func(context.Context) error, error)
	close()
}

var errNotObtained = errors.New("not obtained")

func newClients(addrs []string) []*redis.Client {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a})
	}
	return cs
}

// readmeClients are the clients the README tells redlock's users to make:
// DialerRetries 1 and ContextTimeoutEnabled. The other contenders use
// go-redis's defaults, as their own docs do.
func readmeClients(addrs []string) []*redis.Client {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, DialerRetries: 1, ContextTimeoutEnabled: true})
	}
	return cs
}

func closeClients(cs []*redis.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// ---- the floor: SET NX PX, then an EVALSHA compare-and-delete ----

var releaseIfOwner = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

type floor struct{ rc *redis.Client }

func floorContender() contender {
	return contender{Name: "floor (SET NX + EVALSHA), 1 node", Lib: "floor", Nodes: 1,
		build: func(addrs []string, _ *atomic.Int64) (instance, error) {
			return floor{newClients(addrs[:1])[0]}, nil
		}}
}

func (f floor) cycle(ctx context.Context, key string) error {
	ok, err := f.rc.SetNX(ctx, key, "token", 10*time.Second).Result()
	if err != nil {
		return err
	}
	if !ok {
		return errNotObtained
	}
	n, err := releaseIfOwner.Run(ctx, f.rc, []string{key}, "token").Int()
	if err == nil && n != 1 {
		err = errors.New("floor: release found another value")
	}
	return err
}

func (f floor) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	ok, err := f.rc.SetNX(ctx, key, "token", 10*time.Second).Result()
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errNotObtained
	}
	return func(ctx context.Context) error {
		return releaseIfOwner.Run(ctx, f.rc, []string{key}, "token").Err()
	}, nil
}

func (f floor) close() { _ = f.rc.Close() }

// ---- bsm/redislock: one node ----

type bsm struct {
	rc   *redis.Client
	c    *redislock.Client
	opts *redislock.Options
}

// countingBackoff counts redislock's retries: it asks for a backoff after
// every failed try.
type countingBackoff struct {
	redislock.RetryStrategy
	failed *atomic.Int64
}

func (c countingBackoff) NextBackoff() time.Duration {
	c.failed.Add(1)
	return c.RetryStrategy.NextBackoff()
}

func redislockContender() contender {
	return contender{Name: "bsm/redislock, 1 node", Lib: "redislock", Nodes: 1,
		build: func(addrs []string, failed *atomic.Int64) (instance, error) {
			rc := newClients(addrs[:1])[0]
			// Its default is one try; waiting needs a retry strategy. 1 ms
			// linear backoff is the most eager that is still a backoff.
			var retry redislock.RetryStrategy = redislock.LinearBackoff(time.Millisecond)
			if failed != nil {
				retry = countingBackoff{retry, failed}
			}
			return bsm{rc, redislock.New(rc), &redislock.Options{RetryStrategy: retry}}, nil
		}}
}

func (b bsm) cycle(ctx context.Context, key string) error {
	l, err := b.c.Obtain(ctx, key, 10*time.Second, nil)
	if err != nil {
		return err
	}
	return l.Release(ctx)
}

func (b bsm) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := b.c.Obtain(ctx, key, 10*time.Second, b.opts)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (b bsm) close() { _ = b.rc.Close() }

// ---- go-redsync/redsync/v4 with its go-redis v9 pool ----

type rsync struct {
	clients []*redis.Client
	rs      *redsync.Redsync
	opts    []redsync.Option
	failed  *atomic.Int64
}

// redsync's default retry delay (redsync.go: 50 to 250 ms, uniformly), and
// its default 32 tries. Given explicitly only so that retries can be
// counted; the behaviour is the default's.
func redsyncDefaultDelay(int) time.Duration {
	return time.Duration(50+rand.IntN(200)) * time.Millisecond
}

// redsyncTunedDelay is the tuned retry: 1 to 3 ms, and tries bounded only
// by the caller's context.
func redsyncTunedDelay(int) time.Duration {
	return time.Millisecond + rand.N(2*time.Millisecond)
}

func redsyncContender(n int, tuned bool) contender {
	name := "redsync v4, " + nodesText(n)
	if tuned {
		name += ", tuned retry"
	}
	return contender{Name: name, Lib: "redsync", Nodes: n,
		build: func(addrs []string, failed *atomic.Int64) (instance, error) {
			clients := newClients(addrs[:n])
			pools := make([]redsyncredis.Pool, n)
			for i, c := range clients {
				pools[i] = goredis.NewPool(c)
			}
			delay, tries := redsyncDefaultDelay, 32
			if tuned {
				delay, tries = redsyncTunedDelay, 1<<30
			}
			count := func(i int) time.Duration {
				if failed != nil {
					failed.Add(1)
				}
				return delay(i)
			}
			return rsync{clients, redsync.New(pools...),
				[]redsync.Option{redsync.WithTries(tries), redsync.WithRetryDelayFunc(count)}, failed}, nil
		}}
}

func (r rsync) cycle(ctx context.Context, key string) error {
	m := r.rs.NewMutex(key, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	if ok, err := m.UnlockContext(ctx); !ok {
		return fmt.Errorf("redsync unlock: %v", err)
	}
	return nil
}

func (r rsync) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, r.opts...)
	if err := m.LockContext(ctx); err != nil {
		if r.failed != nil {
			r.failed.Add(1) // the last try, which asks for no delay
		}
		return nil, err
	}
	return func(ctx context.Context) error {
		if ok, err := m.UnlockContext(ctx); !ok {
			return fmt.Errorf("redsync unlock: %v", err)
		}
		return nil
	}, nil
}

func (r rsync) close() { closeClients(r.clients) }

// ---- redlock ----

type rl struct {
	clients []*redis.Client
	c       *redlock.Client
}

// refusals counts redlock's failed attempts through its observer hook.
// refusals counts failed attempts, and hands a winning attempt's ticket
// (Event.Queued) to contend through the Lock call's context.
func refusals(failed *atomic.Int64) redlock.Observer {
	return func(e redlock.Event) {
		if e.Kind != redlock.EventAcquire {
			return
		}
		if e.Err != nil {
			failed.Add(1)
		} else if t, ok := e.Context.Value(queuedKey{}).(*time.Time); ok && !e.Queued.IsZero() {
			*t = e.Queued
		}
	}
}

func redlockContender(n int, variant string, opts ...redlock.Option) contender {
	name := "redlock, " + nodesText(n)
	if variant != "" {
		name += ", " + variant
	}
	return contender{Name: name, Lib: "redlock", Nodes: n,
		build: func(addrs []string, failed *atomic.Int64) (instance, error) {
			clients := readmeClients(addrs[:n])
			ucs := make([]redis.UniversalClient, n)
			for i, c := range clients {
				ucs[i] = c
			}
			o := append([]redlock.Option{redlock.WithAnyNodeCount()}, opts...)
			if failed != nil {
				o = append(o, redlock.WithObserver(refusals(failed)))
			}
			c, err := redlock.New(ucs, o...)
			if err != nil {
				closeClients(clients)
				return nil, err
			}
			return rl{clients, c}, nil
		}}
}

func (r rl) cycle(ctx context.Context, key string) error {
	l, err := r.c.Lock(ctx, key)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

func (r rl) lock(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := r.c.Lock(ctx, key)
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (r rl) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.c.Close(ctx)
	closeClients(r.clients)
}

func nodesText(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}
