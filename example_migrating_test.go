package redlock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redlock-go/redlock"
)

// The examples of docs/migrating.md: each row of its tables is one of the
// calls below, compiled against the current API (they are not run: they
// need servers).

// From go-redsync/redsync: redsync.New(pools...) and
// rs.NewMutex(name, WithExpiry, WithTries, WithRetryDelay).
func Example_migratingFromRedsync() {
	c, err := redlock.New(nodes(), // redsync.New(pools...)
		redlock.WithTTL(8*time.Second),                // redsync.WithExpiry(8*time.Second), its default
		redlock.WithDriftFactor(0.01),                 // redsync.WithDriftFactor(0.01), the same default
		redlock.WithNodeTimeout(400*time.Millisecond), // redsync.WithTimeoutFactor(0.05): 5% of the expiry
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	// mutex.LockContext(ctx) with redsync's defaults, WithTries(32) and a
	// random 50–250 ms between tries (WithRetryDelay(d) is
	// RandomBackoff(d, d)):
	l, err := c.Lock(ctx, "orders", redlock.WithRetry(
		redlock.LimitRetry(redlock.RandomBackoff(50*time.Millisecond, 250*time.Millisecond), 31)))
	if errors.Is(err, redlock.ErrNotObtained) { // redsync.ErrFailed, *redsync.ErrTaken
		return
	} else if err != nil {
		log.Fatal(err)
	}
	// mutex.TryLockContext(ctx):
	if _, err := c.TryLock(ctx, "orders:other"); errors.Is(err, redlock.ErrNotObtained) {
		log.Print("held elsewhere")
	}
	// mutex.ExtendContext(ctx) (ok, err): the TTL is given each time.
	if err := l.Extend(ctx, 8*time.Second); errors.Is(err, redlock.ErrTakenOver) || errors.Is(err, redlock.ErrExpired) {
		log.Print("lost it") // redsync.ErrExtendFailed
	}
	// mutex.Until() and mutex.Valid(), and the signal redsync has not:
	_, _, _ = l.Validity(), l.Done(), l.Err()
	// mutex.UnlockContext(ctx) (ok, err):
	if err := l.Unlock(ctx); errors.Is(err, redlock.ErrExpired) {
		log.Print("expired before release") // redsync.ErrLockAlreadyExpired
	}
}

// From bsm/redislock: redislock.New(client), Obtain, Refresh, Release,
// TTL and Metadata.
func Example_migratingFromRedislock() {
	c, err := redlock.New(nodes()) // redislock.New(client): one client; here one per master
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	// locker.Obtain(ctx, key, ttl, &redislock.Options{
	//     RetryStrategy: redislock.LimitRetry(redislock.ExponentialBackoff(16ms, 1s), 10),
	//     Metadata: "worker-1"}):
	l, err := c.Lock(ctx, "job:42",
		redlock.WithTTL(30*time.Second),
		redlock.WithRetry(redlock.LimitRetry(redlock.ExponentialBackoff(16*time.Millisecond, time.Second), 10)),
		redlock.WithMetadata("worker-1"))
	if errors.Is(err, redlock.ErrNotObtained) { // redislock.ErrNotObtained
		return
	} else if err != nil {
		log.Fatal(err)
	}
	// Obtain with no RetryStrategy (redislock's default: no retry), with
	// NoRetry, and with LinearBackoff(d):
	_, _ = c.TryLock(ctx, "job:43")
	_, _ = c.Lock(ctx, "job:43", redlock.WithRetry(redlock.NoRetry()))
	_, _ = c.Lock(ctx, "job:43", redlock.WithRetry(redlock.LinearBackoff(100*time.Millisecond, 100*time.Millisecond)))
	// lock.Refresh(ctx, ttl, nil):
	if err := l.Extend(ctx, 30*time.Second); err != nil {
		log.Print(err) // redislock.ErrNotObtained
	}
	// lock.TTL(ctx): time left, computed on the client, no round trip.
	_ = l.Validity()
	// lock.Key(), lock.Token(); lock.Metadata() is Inspect's:
	_, _ = l.Key(), l.Token()
	if st, err := c.Inspect(ctx, "job:42"); err == nil {
		_, _, _ = st.Holder() // holder, metadata, held by a majority
	}
	// lock.Release(ctx):
	if err := l.Unlock(ctx); errors.Is(err, redlock.ErrReleased) {
		log.Print("released twice") // redislock.ErrLockNotHeld
	}
}

// From Redisson: getLock with its watchdog, tryLock(waitTime, leaseTime),
// getFairLock, getReadWriteLock and getPermitExpirableSemaphore.
func Example_migratingFromRedisson() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx := context.Background()
	// lock.lock() with the watchdog (30 s, renewed every 10 s) around work:
	err = c.Do(ctx, "inventory", func(ctx context.Context) error {
		return nil // ctx ends if the lock is lost
	}, redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Print(err)
	}
	// or, holding it across calls, renewed every TTL/3 until Unlock:
	if l, err := c.Lock(ctx, "inventory", redlock.WithTTL(30*time.Second), redlock.WithAutoExtend(0)); err == nil {
		_ = l.Unlock(ctx)
	}
	// lock.tryLock(5, 10, SECONDS): wait up to 5 s, hold 10 s:
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if l, err := c.Lock(wctx, "inventory", redlock.WithTTL(10*time.Second)); err == nil {
		defer l.Unlock(ctx) // lock.unlock()
	}
	// lock.lock() twice in one thread (re-entry): pass the holder's token.
	if l, err := c.Lock(ctx, "inventory"); err == nil {
		again, _ := c.Lock(ctx, "inventory", redlock.WithToken(l.Token()))
		_ = again
		_ = l.Unlock(ctx)
	}
	// getFairLock(name): every Lock waits in arrival order already.
	// getReadWriteLock(name).readLock() / .writeLock():
	rw, err := c.RWMutex("config")
	if err != nil {
		log.Fatal(err)
	}
	if r, err := rw.RLock(ctx); err == nil {
		_ = r.Unlock(ctx)
	}
	if w, err := rw.Lock(ctx); err == nil {
		_ = w.Unlock(ctx)
	}
	// getPermitExpirableSemaphore(name): trySetPermits(3); acquire(leaseTime)
	// returns a permit ID, release(permitId) gives it back:
	sem, err := c.Semaphore("gpu", 3, redlock.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	if p, err := sem.Acquire(ctx); err == nil {
		_ = p.Unlock(ctx)
	}
}
