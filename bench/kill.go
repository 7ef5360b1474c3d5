package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// ---- 3b: a waiting process SIGKILLed at the head of the queue ----

// killResult is the measure: how long after a waiting process at the head
// of the key's wait queue was SIGKILLed the next waiter got the lock, the
// holder having released it at once. Its place lapses within one waiter
// lease of its last refresh; the next waiter should follow within 10 ms.
type killResult struct {
	Lease    time.Duration // the waiters' lease (the default)
	Reps     int
	P50, Max time.Duration
}

// waiterEnv names the environment variable that makes the bench binary a
// waiting process: "addr,addr,…|key".
const waiterEnv = "REDLOCK_BENCH_WAITER"

// waiterChild is the waiting process: it waits for the key with default
// options until it is killed (or, if it ever gets the lock, releases it
// and exits 3, which the measure reports).
func waiterChild(spec string) int {
	addrs, key, _ := strings.Cut(spec, "|")
	clients := readmeClients(strings.Split(addrs, ","))
	defer closeClients(clients)
	ucs := make([]redis.UniversalClient, len(clients))
	for i, c := range clients {
		ucs[i] = c
	}
	c, err := redlock.New(ucs, redlock.WithAnyNodeCount())
	if err != nil {
		fmt.Fprintln(os.Stderr, "waiter:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.Lock(ctx, key)
	if err != nil {
		fmt.Fprintln(os.Stderr, "waiter:", err)
		return 1
	}
	_ = l.Unlock(ctx)
	return 3
}

// measureKill runs reps times: a holder takes the key on 5 nodes; a waiting
// process queues for it, then a waiter in this process queues behind; the
// waiting process is SIGKILLed and the holder releases at once; the time
// from the kill to the second waiter's Lock returning is the figure.
func measureKill(ctx context.Context, e *env, reps int) (killResult, error) {
	res := killResult{Lease: time.Second, Reps: reps}
	c := redlockContender(5, "")
	addrs := e.addrs(c)
	admins := newClients(addrs)
	defer closeClients(admins)
	var took []time.Duration
	for r := range reps {
		d, err := killOnce(ctx, e, c, addrs, admins, fmt.Sprintf("bench:kill:%d:%d", r, time.Now().UnixNano()))
		if err != nil {
			return res, err
		}
		took = append(took, d)
	}
	s := sorted(took)
	res.P50, res.Max = pct(s, 0.5), s[len(s)-1]
	return res, nil
}

func killOnce(ctx context.Context, e *env, c contender, addrs []string, admins []*redis.Client, key string) (time.Duration, error) {
	holder, err := e.build(c, nil)
	if err != nil {
		return 0, err
	}
	defer holder.close()
	waiter, err := e.build(c, nil)
	if err != nil {
		return 0, err
	}
	defer waiter.close()
	unlock, err := holder.lock(ctx, key)
	if err != nil {
		return 0, err
	}
	child := exec.CommandContext(ctx, os.Args[0])
	child.Env = append(os.Environ(), waiterEnv+"="+strings.Join(addrs, ",")+"|"+key)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	defer func() {
		_ = child.Process.Kill()
		<-exited
	}()
	if err := waitQueue(ctx, admins, key, 1, exited); err != nil {
		return 0, fmt.Errorf("the waiting process: %w", err)
	}
	got := make(chan error, 1)
	var acquired time.Time
	go func() {
		unlock2, err := waiter.lock(ctx, key)
		acquired = time.Now()
		if err == nil {
			err = unlock2(ctx)
		}
		got <- err
	}()
	if err := waitQueue(ctx, admins, key, 2, exited); err != nil {
		return 0, fmt.Errorf("the second waiter: %w", err)
	}
	if err := child.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	killed := time.Now()
	if err := unlock(ctx); err != nil {
		return 0, err
	}
	if err := <-got; err != nil {
		return 0, err
	}
	return acquired.Sub(killed), nil
}

// waitQueue waits until key's wait queue holds n waiters on every node.
func waitQueue(ctx context.Context, admins []*redis.Client, key string, n int, exited <-chan error) error {
	q := "redlock:{" + key + "}:queue"
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := true
		for _, a := range admins {
			if got, err := a.ZCard(ctx, q).Result(); err != nil || got != int64(n) {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		select {
		case err := <-exited:
			return fmt.Errorf("the waiting process exited first: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("not queued on every node within 30 s")
		}
	}
}
