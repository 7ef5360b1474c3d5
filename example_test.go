package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// Three independent Redis masters. Examples that talk to them have no
// Output line: they are compiled, not run.
func nodes() []redis.UniversalClient {
	return []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: "10.0.0.1:6379"}),
		redis.NewClient(&redis.Options{Addr: "10.0.0.2:6379"}),
		redis.NewClient(&redis.Options{Addr: "10.0.0.3:6379"}),
	}
}

func Example() {
	c, err := redlock.New(nodes(), redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	lock, err := c.Lock(ctx, "report:daily", redlock.WithMetadata("host=web-1 pid=4242"))
	if errors.Is(err, redlock.ErrNotObtained) {
		log.Print("someone else is producing the report")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	// Release even if ctx has been cancelled by then.
	defer lock.Unlock(context.WithoutCancel(ctx))

	// Check the lock before each step that needs it, and extend it where
	// the step needs more than is left. A Lock that waited may return a
	// lock the holder's release granted, valid at first for less than a
	// waiter lease (1 s by default): it extends itself to its TTL in the
	// background once a tenth of that has passed.
	if lock.Validity() < time.Second {
		if err := lock.Extend(ctx, 30*time.Second); err != nil {
			log.Print("lock lost: ", err)
			return
		}
	}
	fmt.Println("producing the report")
}

func ExampleClient_TryLock() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	lock, err := c.TryLock(context.Background(), "cron:cleanup")
	if errors.Is(err, redlock.ErrNotObtained) {
		return // another instance runs it
	} else if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())
	fmt.Println("cleaning up")
}

func ExampleClient_Lock() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	// Wait up to 5 s, retrying with exponential backoff and full jitter,
	// at most 20 times.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lock, err := c.Lock(ctx, "account:42",
		redlock.WithTTL(10*time.Second),
		redlock.WithRetry(redlock.LimitRetry(redlock.ExponentialBackoff(10*time.Millisecond, time.Second), 20)))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.WithoutCancel(ctx))
}

// Extend resets the TTL by hand; WithAutoExtend or Client.Do do it for you.
func ExampleLock_Extend() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := c.Lock(ctx, "import", redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(ctx)
	// … first half of the work …
	if err := lock.Extend(ctx, 10*time.Second); err != nil {
		if errors.Is(err, redlock.ErrTakenOver) || errors.Is(err, redlock.ErrExpired) {
			log.Print("lock gone, stopping: ", err)
			return
		}
		log.Print("not extended, ", lock.Validity(), " left: ", err) // transient
	}
	// … second half …
}

// Do runs work under a lock that is extended while the work runs; the
// work's context is cancelled, with the reason as its cause, if the lock
// cannot be kept.
func ExampleClient_Do() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	err = c.Do(context.Background(), "report:daily", func(ctx context.Context) error {
		for _, part := range []string{"a", "b", "c"} {
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx) // ErrTakenOver or ErrExpired
			}
			fmt.Println("writing part", part)
		}
		return nil
	}, redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Print(err)
	}
}

// Without a closure: auto-extend a Lock, and watch Done.
func ExampleLock_Done() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	lock, err := c.Lock(ctx, "leader", redlock.WithAutoExtend(0))
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(ctx)
	select {
	case <-lock.Done():
		log.Print("no longer leader: ", lock.Err()) // ErrExpired or ErrTakenOver
	case <-ctx.Done():
	}
}

// WithLogger reports every acquisition, extension, release and early end
// through log/slog; WithObserver takes any function of events, e.g. for
// metrics.
func ExampleWithLogger() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := redlock.New(nodes(), redlock.WithLogger(logger),
		redlock.WithObserver(func(e redlock.Event) {
			if e.Kind == redlock.EventEnd {
				fmt.Println(e.Key, "ended after", e.Held, "held:", e.Err)
			}
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
}

// With fencing, each holder gets a token that grows with every holder; a
// store that refuses tokens below the last it accepted stops a holder that
// was paused past its lock (see docs/fencing.md).
func ExampleWithFencing() {
	c, err := redlock.New(nodes(), redlock.WithFencing())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	lock, err := c.Lock(context.Background(), "report:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.Background())
	// UPDATE reports SET body = $1, fence = $2 WHERE id = 42 AND fence < $2
	fmt.Println("writing with fencing token", lock.Fence())
}

// Close releases what the Client still holds at shutdown.
func ExampleClient_Close() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	go func() { _ = c.Do(ctx, "worker", func(ctx context.Context) error { <-ctx.Done(); return nil }) }()
	<-ctx.Done()
	shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := c.Close(shutdown); err != nil {
		log.Print("some locks expire on their own: ", err)
	}
}

// Re-entry: a holder passes its own token to take the lock again, which
// refreshes its TTL; one Unlock releases it.
func ExampleWithToken() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := c.Lock(ctx, "job:7")
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.TryLock(ctx, "job:7", redlock.WithToken(lock.Token()))
	if err != nil {
		log.Fatal(err)
	}
	defer again.Unlock(ctx)
}

// UnlockAfter releases the lock but keeps others out for a cooldown: here,
// the job runs at most once an hour, across all instances.
func ExampleLock_UnlockAfter() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lock, err := c.TryLock(ctx, "hourly-digest", redlock.WithTTL(time.Minute))
	if err != nil {
		return
	}
	// … send the digest …
	if err := lock.UnlockAfter(ctx, time.Hour); err != nil {
		log.Print(err)
	}
}

func ExampleClient_Inspect() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Inspect(context.Background(), "report:daily")
	if err != nil {
		log.Fatal(err)
	}
	if holder, meta, ok := s.Holder(); ok {
		fmt.Printf("held by %s (%s) for %v more\n", holder, meta, s.Remaining())
	}
	for _, n := range s.Nodes {
		fmt.Printf("%s held=%v ttl=%v err=%v\n", n.Node, n.Held, n.TTL, n.Err)
	}
}

// Errors tell what happened with errors.Is, and which node said what with
// errors.As. This one needs no Redis: the context is already cancelled, so
// no node is asked.
func ExampleQuorumError() {
	clients := []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		redis.NewClient(&redis.Options{Addr: "127.0.0.1:2"}),
		redis.NewClient(&redis.Options{Addr: "127.0.0.1:3"}),
	}
	defer func() {
		for _, cl := range clients {
			cl.Close() // the Client never closes the go-redis clients it is given
		}
	}()
	c, err := redlock.New(clients)
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.TryLock(ctx, "job")
	fmt.Println(errors.Is(err, redlock.ErrNotObtained), errors.Is(err, context.Canceled))
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Println(qe.Op, qe.Quorum, qe.Granted)
	}
	fmt.Println(err)

	_, err = c.TryLock(context.Background(), "")
	fmt.Println(errors.Is(err, redlock.ErrInvalidArgument), err)
	// Output:
	// true true
	// lock 2 0
	// redlock: lock "job": not obtained: no node asked: context canceled
	// true redlock: invalid argument: empty key
}

// Replicas of a service queue for one key in the order they asked, across
// processes; a replica that dies while it waits holds the others up for at
// most its waiter lease. A shorter lease hands on sooner after a crash, at
// the cost of a refresh every lease/3 per waiting Lock.
func ExampleWithWaiterLease() {
	c, err := redlock.New(nodes(), redlock.WithWaiterLease(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock, err := c.Lock(ctx, "partition:7")
	if err != nil {
		log.Fatal(err)
	}
	defer lock.Unlock(context.WithoutCancel(ctx))

	// Each attempt's event says when its Lock call took its place in the
	// queue (zero if it got the lock at the first attempt).
	_ = redlock.WithObserver(func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.Err == nil && !e.Queued.IsZero() {
			log.Printf("%s: waited %v in the queue", e.Key, time.Since(e.Queued))
		}
	})
}
