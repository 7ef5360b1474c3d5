package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

// The paused holder: a child process (this test binary again, see
// TestMain) takes a lock one way, reports that it holds it, and looks at it
// in a loop that never blocks; the parent freezes it with SIGSTOP for
// longer than the TTL and thaws it with SIGCONT. The child reports what its
// first look after the pause saw. It runs with GOMAXPROCS=1: the looking
// goroutine is the one on the processor when the process is frozen, and it
// goes on first when thawed, before the Go scheduler has run the timer or
// auto-extension goroutine that would signal the end. So the look alone
// must see it, at once.
const (
	pausedChildEnv = "REDLOCK_PAUSED_CHILD" // the way to hold and look, e.g. "lead/ctx.Err"
	pausedAddrsEnv = "REDLOCK_PAUSED_ADDRS"
	pausedTTL      = time.Second
)

// pauseReport is what the child reports.
type pauseReport struct {
	Gap        time.Duration // how long the child saw itself paused
	Ended      bool          // the first look after the pause saw the end
	EndedEarly bool          // a look before the pause saw the end: the test could not pause a holder
	Err        string        // the holding call's error
}

// TestPausedHolderSeesItsEnd: a holder frozen past its lock's validity
// (SIGSTOP) sees, at its first look after SIGCONT, that the lock has
// ended, whichever way it holds (Lead, Do, Lock with auto-extension) and
// looks (the work context's Err or Done, Err or Done of the lock), with
// default options and the README's node options.
func TestPausedHolderSeesItsEnd(t *testing.T) {
	needProcesses(t, "SIGSTOP of a child process holding a lock")
	nodes := StartNodes(t, 3)
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr
	}
	for _, way := range []string{"lead/ctx.Err", "lead/Leadership.Done", "do/ctx.Done", "lock/Lock.Err", "lock/Lock.Done"} {
		t.Run(way, func(t *testing.T) {
			rep := runPausedChild(t, way, addrs)
			if rep.EndedEarly {
				t.Fatalf("the lock ended before the pause: %+v", rep)
			}
			if rep.Gap <= pausedTTL {
				t.Fatalf("the child saw a pause of %v, want over %v", rep.Gap, pausedTTL)
			}
			if !rep.Ended {
				t.Errorf("after a pause of %v (TTL %v), the first look saw the lock still held", rep.Gap, pausedTTL)
			}
			if !strings.Contains(rep.Err, "expired") {
				t.Errorf("the holding call returned %q, want an expiry", rep.Err)
			}
		})
	}
}

// runPausedChild runs the child for way, freezes it for twice the TTL once
// it holds, thaws it, and returns its report.
func runPausedChild(t *testing.T, way string, addrs []string) pauseReport {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), pausedChildEnv+"="+way, pausedAddrsEnv+"="+strings.Join(addrs, ","), "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // on every path: a child left frozen would never end
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "holding" {
		t.Fatalf("the child did not report holding (%q, %v)", lines.Text(), lines.Err())
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * pausedTTL)
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if !lines.Scan() {
		t.Fatalf("no report from the child: %v", lines.Err())
	}
	var rep pauseReport
	if err := json.Unmarshal(lines.Bytes(), &rep); err != nil {
		t.Fatalf("the child's report %q: %v", lines.Text(), err)
	}
	return rep
}

// pausedChild is the child's main: it holds the lock as way says, and
// prints "holding", then its report.
func pausedChild(way string) int {
	var clients []redis.UniversalClient
	for _, addr := range strings.Split(os.Getenv(pausedAddrsEnv), ",") {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, ContextTimeoutEnabled: true}))
	}
	c, err := redlock.New(clients, redlock.WithTTL(pausedTTL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close(context.Background())
	hold, look, _ := strings.Cut(way, "/")
	var rep pauseReport
	ctx := context.Background()
	key := fmt.Sprintf("paused:%d", os.Getpid())
	switch hold {
	case "lead":
		e, err := c.Election(key)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		err = e.Lead(ctx, "child", func(ctx context.Context, ld *redlock.Leadership) error {
			rep = spinLooking(ctx, ld.Lock(), look)
			return nil
		})
		rep.Err = fmt.Sprint(err)
	case "do":
		err := c.Do(ctx, key, func(ctx context.Context) error {
			rep = spinLooking(ctx, nil, look)
			return nil
		})
		rep.Err = fmt.Sprint(err)
	case "lock":
		l, err := c.Lock(ctx, key, redlock.WithAutoExtend(0))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		rep = spinLooking(ctx, l, look)
		rep.Err = fmt.Sprint(l.Err())
		_ = l.Unlock(ctx)
	}
	if err := json.NewEncoder(os.Stdout).Encode(rep); err != nil {
		return 1
	}
	return 0
}

// spinLooking reports holding and looks at the lock in a loop that never
// blocks, until it finds itself resumed after a pause longer than the TTL,
// and reports what the first look after it saw. A look that straddled the
// pause (it may have read the clock before) does not count: the next does.
func spinLooking(ctx context.Context, l *redlock.Lock, how string) pauseReport {
	ended := func() bool {
		switch how {
		case "ctx.Err":
			return ctx.Err() != nil
		case "ctx.Done":
			return isClosed(ctx.Done())
		case "Leadership.Done", "Lock.Done":
			return isClosed(l.Done())
		}
		return l.Err() != nil
	}
	last := time.Now() // before the report: the parent may freeze the child right after it
	fmt.Println("holding")
	var paused time.Duration // the last look straddled a pause: the next one reports
	for deadline := last.Add(time.Minute); last.Before(deadline); {
		before := time.Now()
		seen := ended()
		after := time.Now()
		gap := before.Sub(last)
		switch {
		case paused > 0 || gap > pausedTTL:
			return pauseReport{Gap: max(paused, gap), Ended: seen}
		case after.Sub(before) > pausedTTL:
			paused = after.Sub(before)
		case seen:
			return pauseReport{EndedEarly: true}
		}
		last = after
	}
	return pauseReport{} // never paused
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
