// Command redlock runs a program under a quorum lock, shows who holds a lock
// across the nodes, and demonstrates the algorithm on embedded nodes.
//
//	redlock exec [flags] KEY [KEY...] -- COMMAND [ARGS...]  run COMMAND while holding every KEY
//	redlock inspect [flags] KEY                            what every node holds at KEY
//	redlock ls [flags] [PATTERN]                           every lock on the nodes, one row each
//	redlock elect [flags] NAME [VALUE] [-- COMMAND]        lead election NAME (running COMMAND)
//	redlock elect --listen [flags] NAME                    print each new leader of NAME
//	redlock demo [flags]                                   a live demo on 5 local nodes
//
// Nodes are given with --nodes or $REDLOCK_NODES: comma-separated redis://
// or rediss:// URLs (with user and password when needed), one per
// independent Redis master. `redlock help` prints the details and the exit
// statuses.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// Exit statuses of redlock itself. exec otherwise exits with the command's.
const (
	exitUsage       = 64  // bad flags or arguments (EX_USAGE)
	exitUnreachable = 69  // fewer than a majority of nodes reachable (EX_UNAVAILABLE)
	exitNotObtained = 75  // the lock is held elsewhere (EX_TEMPFAIL: try again later)
	exitConfig      = 78  // the nodes cannot grant the lock until they or the options change (EX_CONFIG)
	exitEnded       = 79  // exec, elect: the lock or leadership ended (expired, taken over) while leading; COMMAND was stopped
	exitFailure     = 125 // anything else that went wrong in redlock
	exitCannotRun   = 126 // exec: the command could not be started
	exitNotFound    = 127 // exec: the command was not found
)

const usage = `redlock: distributed locks over independent Redis masters (Redlock)

Usage:
  redlock exec [flags] KEY [KEY...] -- COMMAND [ARGS...]
      Acquire KEY on a majority of the nodes, run COMMAND while keeping the
      lock alive, release it when COMMAND exits, and exit with its status.
      With several KEYs (and the "--"), lock all of them or none. With
      --read or --write, take that side of read-write lock KEY (inspect
      it as rw:KEY).
      With --permits N, take one of N permits of semaphore KEY instead:
      at most N run at once.
  redlock inspect [flags] KEY
      Show what every node holds at KEY, and whether a majority holds it
      (with --permits N, each slot of semaphore KEY).
  redlock ls [flags] [PATTERN]
      List every lock whose name matches PATTERN (a glob; default *), one
      row each: kind, the majority's verdict (held, free, unknown), holder,
      time left, fence or term, waiters. Reads with SCAN; writes nothing.
      --json for scripts, --watch to redraw every second.
  redlock elect [flags] NAME [VALUE] [-- COMMAND [ARGS...]]
      Campaign in election NAME (advertising VALUE) until leading; then run
      COMMAND while leading (with $REDLOCK_TERM), stop it if the leadership
      is lost, resign when it exits and exit with its status; without
      COMMAND, lead until interrupted, then resign. A signal while
      standing by ends the campaign, with status 0. With --health ADDR,
      GET ADDR/healthz answers 200 while standing by or leading, and 503
      when leading but not renewed for over a third of the TTL.
  redlock elect --listen [flags] NAME
      Print each new leader of NAME (TERM VALUE), until interrupted.
  redlock demo [flags]
      Workers contend for a lock on 5 local nodes while nodes are killed
      and restored, live. Needs nothing but this binary.
  redlock help [COMMAND]
      This text, or a command's flags.

Nodes (exec, inspect, ls, elect): --nodes URL,URL,... or $REDLOCK_NODES, one
URL per independent Redis master: redis://[user:password@]host:port[/db],
or rediss:// for TLS. Use 3, 5 or 7 nodes; a majority must agree.

Exit statuses:
  the command's own    exec or elect ran COMMAND (128+N if a signal N ended it)
  64                   bad usage
  69                   fewer than a majority of nodes could be reached
  75                   the lock is held elsewhere (still, after --wait; elect:
                       another candidate still leads after --wait)
  78                   a majority of nodes cannot grant the lock until they
                       or the flags change (an ACL denial, a replica, a key
                       of another type...); the message says what
  79                   exec, elect: the lock or leadership ended (it expired,
                       or was taken over) while leading; COMMAND got
                       SIGTERM, then SIGKILL after --grace
  125                  another error in redlock
  126, 127             exec, elect: COMMAND could not be run, or was not found

Example, a cron job that must never run twice at once:
  */5 * * * * REDLOCK_NODES=redis://r1:6379,redis://r2:6379,redis://r3:6379 \
      redlock exec --wait 0 nightly-report -- /usr/local/bin/report

Example, one active scheduler among replicas; the others stand by:
  redlock elect scheduler "$(hostname)" -- /usr/local/bin/scheduler
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the process: it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	// go-redis logs failed dials itself; redlock reports each node's error.
	redis.SetLogger(quietLogger{})
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "exec":
		return runExec(rest, stdout, stderr)
	case "inspect":
		return runInspect(rest, stdout, stderr)
	case "ls":
		return runLs(rest, stdout, stderr)
	case "elect":
		return runElect(rest, stdout, stderr)
	case "demo":
		return runDemo(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 && rest[0] != "" {
			return run([]string{rest[0], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "redlock: unknown command %q (want exec, inspect, elect, demo or help)\n", cmd)
		return exitUsage
	}
}

// newFlags returns a flag set whose errors and -help go to stderr with the
// command's synopsis.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("redlock "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: redlock %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, and turns errors into an exit status: 0 after
// -help, exitUsage otherwise. ok reports whether to go on.
func parseFlags(fs *flag.FlagSet, args []string) (status int, ok bool) {
	switch err := fs.Parse(args); {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		return 0, false
	default:
		return exitUsage, false // the flag package has printed the error and the usage
	}
}

// usageError prints a one-line error and returns exitUsage.
func usageError(stderr io.Writer, name, format string, args ...any) int {
	fmt.Fprintf(stderr, "redlock %s: %s (see redlock help %s)\n", name, fmt.Sprintf(format, args...), name)
	return exitUsage
}

// nodeFlags are the flags that say where the nodes are and how to talk to
// them, shared by exec and inspect.
type nodeFlags struct {
	nodes       string
	prefix      string
	nodeTimeout time.Duration
	anyCount    bool
}

func (n *nodeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.nodes, "nodes", "", "comma-separated `URLs` of the Redis masters (default $REDLOCK_NODES)")
	fs.StringVar(&n.prefix, "prefix", "redlock:", "prefix of the lock's Redis keys (the library's WithKeyPrefix)")
	fs.DurationVar(&n.nodeTimeout, "node-timeout", 0, "how long to wait for one node per operation (default TTL/20)")
	fs.BoolVar(&n.anyCount, "any-node-count", false, "allow 1, 2 or an even number of nodes (a majority of 2 is both)")
}

// clients parses the node URLs into go-redis clients with the options
// redlock recommends for lock nodes: one dial attempt, and context deadlines
// honoured on reads.
func (n *nodeFlags) clients() ([]redis.UniversalClient, error) {
	list := n.nodes
	if list == "" {
		list = os.Getenv("REDLOCK_NODES")
	}
	if strings.TrimSpace(list) == "" {
		return nil, errors.New("no nodes: give --nodes redis://host:port,... or set REDLOCK_NODES")
	}
	var out []redis.UniversalClient
	for _, u := range strings.Split(list, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		if !strings.Contains(u, "://") {
			u = "redis://" + u
		}
		opt, err := redis.ParseURL(u)
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("node %q: %v", redactURL(u), err)
		}
		opt.DialerRetries = 1
		opt.ContextTimeoutEnabled = true
		opt.DialTimeout = 2 * time.Second
		out = append(out, redis.NewClient(opt))
	}
	return out, nil
}

// redactURL hides a password in a node URL, for error messages.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	userinfo, host, ok := strings.Cut(rest, "@")
	if !ok {
		return u
	}
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + host
	}
	return u
}

// options are the Client options the node flags imply.
func (n *nodeFlags) options() []redlock.Option {
	opts := []redlock.Option{redlock.WithKeyPrefix(n.prefix)}
	if n.nodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(n.nodeTimeout))
	}
	if n.anyCount {
		opts = append(opts, redlock.WithAnyNodeCount())
	}
	return opts
}

func closeAll(cs []redis.UniversalClient) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// failureStatus maps a failed Lock to an exit status: exitNotObtained when
// a node said another token holds the key, or when enough nodes answered;
// exitUnreachable when fewer than a majority answered and none of them saw
// another holder; exitUsage for invalid arguments.
func failureStatus(err error) int {
	var qe *redlock.QuorumError
	switch {
	case errors.Is(err, redlock.ErrInvalidArgument):
		return exitUsage
	case errors.Is(err, redlock.ErrUnusable):
		return exitConfig
	case errors.As(err, &qe):
		answered := qe.Granted
		for _, n := range qe.Nodes {
			if errors.Is(n.Err, redlock.ErrHeld) {
				return exitNotObtained // held elsewhere, whatever the other nodes say
			}
			if !unreachable(n.Err) {
				answered++
			}
		}
		if answered < qe.Quorum {
			return exitUnreachable
		}
		return exitNotObtained
	case errors.Is(err, redlock.ErrNotObtained):
		return exitNotObtained
	}
	return exitFailure
}

// unreachable reports whether a node's error means it did not answer: not a
// refusal, and not an error reply from the server.
func unreachable(err error) bool {
	var rerr redis.Error
	switch {
	case err == nil, errors.Is(err, redlock.ErrHeld), errors.Is(err, redlock.ErrNoKey),
		errors.Is(err, redlock.ErrNodeRestarted):
		return false
	case errors.As(err, &rerr):
		return false // the server answered, with an error
	}
	return true
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
