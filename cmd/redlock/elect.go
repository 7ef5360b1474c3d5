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
	a, status, ok := parseElect(args, stderr)
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
	e, err := c.Election(a.election)
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
	var h *health
	if a.health != "" {
		h = &health{margin: healthMargin(a.ttl)}
		bound, stop, err := serveHealth(a.health, h)
		if err != nil {
			return usageError(stderr, name, "%v", err)
		}
		defer stop()
		fmt.Fprintf(stderr, "redlock elect: health at http://%s/healthz\n", bound)
	}
	if a.listen {
		defer stopOnSignal(sigs, cancel)()
		for l := range e.Observe(ctx) {
			fmt.Fprintf(stdout, "%d %s\n", l.Term, l.Value)
		}
		return 0
	}
	return a.lead(ctx, e, h, sigs, stopOnSignal(sigs, cancel), stderr)
}

// electArgs is what `redlock elect` was asked.
type electArgs struct {
	nf              nodeFlags
	listen          bool
	wait, ttl       time.Duration
	grace           time.Duration
	election, value string
	command         []string // after --; nil for none
	health          string   // --health: the address of the /healthz endpoint; "" for none
}

// parseElect reads `redlock elect`'s flags and arguments; !ok: exit with
// status.
func parseElect(args []string, stderr io.Writer) (a electArgs, status int, ok bool) {
	const name = "elect"
	fs := newFlags(name, "[flags] NAME [VALUE] [-- COMMAND [ARGS...]]\n       redlock elect --listen [flags] NAME", stderr)
	a.nf.register(fs)
	fs.BoolVar(&a.listen, "listen", false, "print each new leader (TERM VALUE) until interrupted, without campaigning")
	fs.BoolVar(&a.listen, "l", false, "short for --listen")
	fs.DurationVar(&a.wait, "wait", 0, "how long to campaign before giving up; 0 waits until interrupted")
	fs.DurationVar(&a.ttl, "ttl", 10*time.Second, "the leadership's TTL: a dead leader is replaced about this long after its last extension (every TTL/3)")
	fs.StringVar(&a.health, "health", "", "serve GET /healthz on this address (host:port): 200 while standing by or leading with the lease renewed, 503 when leading but not renewed for over a third of the TTL")
	fs.DurationVar(&a.grace, "grace", 0, "after the leadership is lost, how long COMMAND has between SIGTERM and SIGKILL (default TTL/20)")
	if status, ok := parseFlags(fs, args); !ok {
		return a, status, false
	}
	rest := fs.Args()
	for i, arg := range rest {
		if arg == "--" {
			rest, a.command = rest[:i], rest[i+1:]
			break
		}
	}
	fail := func(format string, args ...any) (electArgs, int, bool) {
		return a, usageError(stderr, name, format, args...), false
	}
	switch {
	case len(rest) == 0:
		return fail("missing NAME")
	case len(rest) > 2:
		return fail("too many arguments before --: want NAME [VALUE]")
	case a.listen && (len(rest) > 1 || a.command != nil):
		return fail("--listen takes NAME only")
	case a.listen && a.health != "":
		return fail("--health is for a candidate: --listen does not campaign")
	case a.command != nil && len(a.command) == 0:
		return fail("missing COMMAND after --")
	case a.wait < 0:
		return fail("--wait %v is negative", a.wait)
	case a.ttl <= 0:
		return fail("--ttl %v: want a positive duration", a.ttl)
	case a.grace < 0:
		return fail("--grace %v is negative", a.grace)
	}
	if a.grace == 0 {
		a.grace = a.ttl / 20
	}
	a.election = rest[0]
	host, _ := os.Hostname()
	a.value = fmt.Sprintf("host=%s pid=%d", host, os.Getpid())
	if len(rest) == 2 {
		a.value = rest[1]
	}
	return a, 0, true
}

// stopOnSignal cancels on the first signal until the returned stop is
// called.
func stopOnSignal(sigs <-chan os.Signal, cancel context.CancelFunc) (stop func()) {
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

// lead campaigns (a signal ends the campaign: stop) and, once leading,
// runs the command or holds the leadership until a signal.
func (a *electArgs) lead(ctx context.Context, e *redlock.Election, h *health, sigs chan os.Signal, stop func(), stderr io.Writer) int {
	const name = "elect"
	cctx := ctx
	if a.wait > 0 {
		var ccancel context.CancelFunc
		cctx, ccancel = context.WithTimeout(ctx, a.wait)
		defer ccancel()
	}
	ld, err := e.Campaign(cctx, a.value)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			// A standby told to stop (by systemd, say) has done nothing
			// wrong: it leaves the queue and exits 0.
			fmt.Fprintf(stderr, "redlock elect: stopped while standing by for %q\n", a.election)
			return 0
		}
		return waitFailure(name, err, ctx, stderr)
	}
	if h != nil {
		h.leading(ld)
	}
	fmt.Fprintf(stderr, "redlock elect: leading %q in term %d\n", a.election, ld.Term())
	if a.command != nil {
		term := strconv.FormatUint(ld.Term(), 10)
		return runLocked(name, ld.Lock(), a.grace, a.command, []string{"REDLOCK_ELECTION=" + a.election, "REDLOCK_TERM=" + term}, sigs, stderr)
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
