package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redlock-go/redlock"
)

// forwarded are the signals exec passes on to the command.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runExec is `redlock exec`: take a lock (or a permit, a side of a
// read-write lock, several keys), run a command while it is held, release.
func runExec(args []string, stdout, stderr io.Writer) int {
	const name = "exec"
	a, status, ok := parseExec(args, stderr)
	if !ok {
		return status
	}
	clients, err := a.nf.clients()
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer closeAll(clients)
	c, err := redlock.New(clients, append(a.nf.options(), redlock.WithTTL(a.ttl))...)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer c.Close(context.Background())
	tryOnce, waitFor, err := a.acquirers(c)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	// Signals that arrive while waiting for the lock end the wait.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	var l *redlock.Lock
	if a.wait == 0 {
		l, err = tryOnce(ctx)
	} else {
		wctx, wcancel := context.WithTimeout(ctx, a.wait)
		l, err = waitFor(wctx)
		wcancel()
	}
	if err != nil {
		return waitFailure(name, err, ctx, stderr)
	}
	cancel() // stop the waiting goroutine: from now on, signals go to COMMAND
	return runLocked(name, l, a.grace, a.command, nil, sigs, stderr)
}

// execArgs is what `redlock exec` was asked.
type execArgs struct {
	nf                        nodeFlags
	wait, ttl, grace, maxHold time.Duration
	fencing, read, write      bool
	meta                      string
	permits                   int
	keys, command             []string
}

// parseExec reads `redlock exec`'s flags and arguments; !ok: exit with
// status.
func parseExec(args []string, stderr io.Writer) (a execArgs, status int, ok bool) {
	const name = "exec"
	fs := newFlags(name, "[flags] KEY [KEY...] -- COMMAND [ARGS...]", stderr)
	a.nf.register(fs)
	fs.DurationVar(&a.wait, "wait", 0, "how long to wait for the lock; 0 tries once")
	fs.DurationVar(&a.ttl, "ttl", 30*time.Second, "the lock's TTL; it is extended every TTL/3 while COMMAND runs")
	fs.BoolVar(&a.fencing, "fencing", false, "hand out a fencing token, passed to COMMAND as $REDLOCK_FENCE")
	host, _ := os.Hostname()
	fs.StringVar(&a.meta, "metadata", fmt.Sprintf("host=%s pid=%d", host, os.Getpid()), "text stored with the lock, shown by inspect")
	fs.DurationVar(&a.grace, "grace", 0, "after the lock is lost, how long COMMAND has between SIGTERM and SIGKILL (default TTL/20)")
	fs.DurationVar(&a.maxHold, "max-hold", 24*time.Hour, "give the lock up (as lost) after this long, at most 720h")
	fs.IntVar(&a.permits, "permits", 0, "take one of N permits of semaphore KEY instead of the lock KEY: at most N run at once (1 to 128)")
	fs.BoolVar(&a.read, "read", false, "take the read side of read-write lock KEY: many readers at once, no writer")
	fs.BoolVar(&a.write, "write", false, "take the write side of read-write lock KEY: no reader, no other writer")
	if status, ok := parseFlags(fs, args); !ok {
		return a, status, false
	}
	fail := func(format string, args ...any) (execArgs, int, bool) {
		return a, usageError(stderr, name, format, args...), false
	}
	rest := fs.Args()
	if len(rest) == 0 || rest[0] == "--" {
		return fail("missing KEY and COMMAND")
	}
	// KEY... -- COMMAND, or KEY COMMAND: several keys need the "--".
	a.keys, a.command = rest[:1], rest[1:]
	if i := slices.Index(rest, "--"); i >= 0 {
		a.keys, a.command = rest[:i], rest[i+1:]
	}
	if len(a.command) == 0 {
		return fail("missing COMMAND after %s --", strings.Join(a.keys, " "))
	}
	modes := 0
	for _, set := range []bool{a.permits != 0, a.read, a.write} {
		if set {
			modes++
		}
	}
	switch {
	case modes > 1:
		return fail("--permits, --read and --write exclude each other")
	case modes == 1 && len(a.keys) > 1:
		return fail("--permits, --read and --write take one KEY, not %d", len(a.keys))
	case a.wait < 0:
		return fail("--wait %v is negative", a.wait)
	case a.ttl <= 0:
		return fail("--ttl %v: want a positive duration", a.ttl)
	}
	if a.grace == 0 {
		a.grace = a.ttl / 20
	}
	if a.grace < 0 {
		return fail("--grace %v is negative", a.grace)
	}
	return a, 0, true
}

// acquirers returns how to try once for what exec was asked to hold, and
// how to wait for it.
func (a *execArgs) acquirers(c *redlock.Client) (tryOnce, waitFor func(context.Context) (*redlock.Lock, error), err error) {
	opts := []redlock.Option{redlock.WithMetadata(a.meta), redlock.WithAutoExtend(0), redlock.WithMaxHold(a.maxHold)}
	if a.fencing {
		opts = append(opts, redlock.WithFencing())
	}
	key := a.keys[0]
	switch {
	case a.permits != 0:
		s, err := c.Semaphore(key, a.permits, opts...)
		if err != nil {
			return nil, nil, err
		}
		return s.TryAcquire, s.Acquire, nil
	case a.read || a.write:
		rw, err := c.RWMutex(key, opts...)
		if err != nil {
			return nil, nil, err
		}
		if a.write {
			return rw.TryLock, rw.Lock, nil
		}
		return rw.TryRLock, rw.RLock, nil
	case len(a.keys) > 1: // every key or none
		m, err := c.MultiLock(a.keys, opts...)
		if err != nil {
			return nil, nil, err
		}
		return m.TryLock, m.Lock, nil
	}
	tryOnce = func(ctx context.Context) (*redlock.Lock, error) { return c.TryLock(ctx, key, opts...) }
	waitFor = func(ctx context.Context) (*redlock.Lock, error) { return c.Lock(ctx, key, opts...) }
	return tryOnce, waitFor, nil
}

// waitFailure reports a failed wait for a lock or leadership, and returns
// the exit status: failureStatus, or exitFailure when a signal (which
// cancelled ctx) ended the wait.
func waitFailure(name string, err error, ctx context.Context, stderr io.Writer) int {
	fmt.Fprintf(stderr, "redlock %s: %v\n", name, err)
	if ctx.Err() != nil {
		return exitFailure
	}
	return failureStatus(err)
}

// runLocked runs command while l is held, with env added to its
// environment, forwarding signals, and stops it if the lock is lost. It
// releases l when the command has exited. name is the redlock command's,
// for messages.
func runLocked(name string, l *redlock.Lock, grace time.Duration, command, env []string, sigs chan os.Signal, stderr io.Writer) int {
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Unlock(ctx); err != nil && !errors.Is(err, redlock.ErrReleased) {
			fmt.Fprintf(stderr, "redlock %s: releasing the lock: %v\n", name, err)
		}
	}()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "REDLOCK_KEY="+l.Key(), "REDLOCK_TOKEN="+l.Token())
	if l.Fence() != 0 {
		cmd.Env = append(cmd.Env, "REDLOCK_FENCE="+strconv.FormatUint(l.Fence(), 10))
	}
	cmd.Env = append(cmd.Env, env...)
	// Its own process group, so that signals reach it once (from us) and
	// reach its children too; and killed if redlock dies, since the lock
	// then runs out with nobody to stop the command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "redlock %s: %v\n", name, err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	group := -cmd.Process.Pid

	ended, endCh := false, l.Done()
	var kill <-chan time.Time
	for {
		select {
		case <-exited:
			if ended {
				return exitEnded
			}
			return exitStatus(cmd.ProcessState)
		case s := <-sigs:
			_ = syscall.Kill(group, s.(syscall.Signal))
		case <-endCh:
			ended, endCh = true, nil
			fmt.Fprintf(stderr, "redlock %s: the lock ended (%v): sending SIGTERM to %s, SIGKILL in %v\n", name, l.Err(), command[0], grace)
			_ = syscall.Kill(group, syscall.SIGTERM)
			kill = time.After(grace)
		case <-kill:
			_ = syscall.Kill(group, syscall.SIGKILL)
			kill = nil
		}
	}
}

// exitStatus is the shell's view of how a process ended: its exit code, or
// 128 + the signal that killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
