package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"time"

	"github.com/redlock-go/redlock"
)

// runElect is `redlock elect`: campaign in an election and lead (running a
// command while leading, or holding the leadership until a signal), or,
// with --listen, print each new leader.
func runElect(args []string, stdout, stderr io.Writer) int {
	const name = "elect"
	fs := newFlags(name, "[flags] NAME [VALUE] [-- COMMAND [ARGS...]]\n       redlock elect --listen [flags] NAME", stderr)
	var nf nodeFlags
	nf.register(fs)
	listen := fs.Bool("listen", false, "print each new leader (TERM VALUE) until interrupted, without campaigning")
	fs.BoolVar(listen, "l", false, "short for --listen")
	wait := fs.Duration("wait", 0, "how long to campaign before giving up; 0 waits until interrupted")
	ttl := fs.Duration("ttl", 10*time.Second, "the leadership's TTL: a dead leader is replaced about this long after its last extension (every TTL/3)")
	grace := fs.Duration("grace", 0, "after the leadership is lost, how long COMMAND has between SIGTERM and SIGKILL (default TTL/20)")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	rest := fs.Args()
	var command []string
	for i, a := range rest {
		if a == "--" {
			rest, command = rest[:i], rest[i+1:]
			break
		}
	}
	switch {
	case len(rest) == 0:
		return usageError(stderr, name, "missing NAME")
	case len(rest) > 2:
		return usageError(stderr, name, "too many arguments before --: want NAME [VALUE]")
	case *listen && (len(rest) > 1 || command != nil):
		return usageError(stderr, name, "--listen takes NAME only")
	case command != nil && len(command) == 0:
		return usageError(stderr, name, "missing COMMAND after --")
	case *wait < 0:
		return usageError(stderr, name, "--wait %v is negative", *wait)
	case *ttl <= 0:
		return usageError(stderr, name, "--ttl %v: want a positive duration", *ttl)
	case *grace < 0:
		return usageError(stderr, name, "--grace %v is negative", *grace)
	}
	if *grace == 0 {
		*grace = *ttl / 20
	}
	election := rest[0]
	host, _ := os.Hostname()
	value := fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
	if len(rest) == 2 {
		value = rest[1]
	}
	clients, err := nf.clients()
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer closeAll(clients)
	c, err := redlock.New(clients, append(nf.options(), redlock.WithTTL(*ttl))...)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer c.Close(context.Background())
	e, err := c.Election(election)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}

	// Signals end the campaign, the listening or the leading; while COMMAND
	// runs they go to it instead.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopOnSignal := func() (stop func()) {
		done := make(chan struct{})
		go func() {
			select {
			case <-sigs:
				cancel()
			case <-done:
			}
		}()
		return func() { close(done) }
	}
	if *listen {
		defer stopOnSignal()()
		for l := range e.Observe(ctx) {
			fmt.Fprintf(stdout, "%d %s\n", l.Term, l.Value)
		}
		return 0
	}

	stop := stopOnSignal()
	cctx := ctx
	if *wait > 0 {
		var ccancel context.CancelFunc
		cctx, ccancel = context.WithTimeout(ctx, *wait)
		defer ccancel()
	}
	ld, err := e.Campaign(cctx, value)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			// A standby told to stop (by systemd, say) has done nothing
			// wrong: it leaves the queue and exits 0.
			fmt.Fprintf(stderr, "redlock elect: stopped while standing by for %q\n", election)
			return 0
		}
		return waitFailure(name, err, ctx, stderr)
	}
	fmt.Fprintf(stderr, "redlock elect: leading %q in term %d\n", election, ld.Term())
	if command != nil {
		term := strconv.FormatUint(ld.Term(), 10)
		return runLocked(name, ld.Lock(), *grace, command, []string{"REDLOCK_ELECTION=" + election, "REDLOCK_TERM=" + term}, sigs, stderr)
	}
	select {
	case <-sigs:
		rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer rcancel()
		if err := ld.Resign(rctx); err != nil {
			fmt.Fprintf(stderr, "redlock elect: resigning: %v\n", err)
			return exitFailure
		}
		return 0
	case <-ld.Lock().Done():
		if errors.Is(ld.Lock().Err(), redlock.ErrReleased) {
			return 0
		}
		fmt.Fprintf(stderr, "redlock elect: the leadership ended: %v\n", ld.Lock().Err())
		return exitEnded
	}
}
