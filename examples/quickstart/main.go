// Command quickstart shows redlock at work on five Redis masters: workers
// contending for one lock, two nodes killed while locking goes on, a third
// killed and the lock refused with every node's reason.
//
//	go run ./examples/quickstart            # starts 5 redis-server processes
//	REDLOCK_ADDRS=h1:6379,h2:6379,h3:6379 go run ./examples/quickstart
//
// With REDLOCK_ADDRS it only locks and unlocks on the given servers (one key,
// "quickstart"): it never kills a server it did not start.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// quiet drops go-redis's own log lines (dial failures of the nodes this
// demo kills on purpose); redlock reports them in its errors.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func run() error {
	redis.SetLogger(quiet{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var servers []*exec.Cmd
	defer func() {
		for _, s := range servers {
			_ = syscall.Kill(-s.Process.Pid, syscall.SIGKILL)
			_ = s.Wait()
		}
	}()
	addrs := strings.Split(os.Getenv("REDLOCK_ADDRS"), ",")
	own := addrs[0] == ""
	if own {
		dir, err := os.MkdirTemp("", "redlock-quickstart")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		addrs = nil
		for range 5 {
			cmd, addr, err := startServer(dir)
			if err != nil {
				return fmt.Errorf("%w (install redis-server, or set REDLOCK_ADDRS)", err)
			}
			servers = append(servers, cmd)
			addrs = append(addrs, addr)
		}
		fmt.Printf("started 5 redis-server processes: %s\n", strings.Join(addrs, " "))
	}

	clients := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		// The go-redis settings redlock recommends for lock nodes: one dial
		// attempt (go-redis otherwise tries 5 times, 100 ms apart), and
		// context deadlines honoured on reads.
		c := redis.NewClient(&redis.Options{Addr: strings.TrimSpace(a), DialerRetries: 1, ContextTimeoutEnabled: true})
		defer c.Close()
		clients[i] = c
	}
	locker, err := redlock.New(clients, redlock.WithTTL(2*time.Second), redlock.WithAnyNodeCount())
	if err != nil {
		return err
	}
	defer locker.Close(context.Background()) // releases what is still held, stops its goroutines
	fmt.Printf("%d nodes, a majority is %d\n\n", len(addrs), locker.Quorum())

	// 1. Four workers contend; the lock never has two holders.
	fmt.Println("4 workers take turns holding \"quickstart\" for 20 ms each:")
	var inside, overlaps, turns atomic.Int32
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for range 3 {
				l, err := locker.Lock(ctx, "quickstart", redlock.WithMetadata(fmt.Sprintf("worker %d", w)),
					redlock.WithRetry(redlock.RandomBackoff(5*time.Millisecond, 30*time.Millisecond)))
				if err != nil {
					fmt.Println("  worker", w, "gave up:", err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				fmt.Printf("  worker %d holds it (token %s…, valid %v more)\n", w, l.Token()[:8], l.Validity().Round(time.Millisecond))
				time.Sleep(20 * time.Millisecond)
				inside.Add(-1)
				turns.Add(1)
				_ = l.Unlock(context.WithoutCancel(ctx))
			}
		})
	}
	wg.Wait()
	fmt.Printf("  %d turns, %d overlaps\n\n", turns.Load(), overlaps.Load())
	if !own || len(servers) < 5 {
		return ctx.Err()
	}

	// 2. Kill two of five nodes: a majority remains, locking goes on.
	for _, s := range servers[:2] {
		_ = syscall.Kill(-s.Process.Pid, syscall.SIGKILL)
	}
	fmt.Println("killed nodes 1 and 2 (SIGKILL)")
	l, err := locker.TryLock(ctx, "quickstart", redlock.WithMetadata("after the crash"))
	if err != nil {
		return fmt.Errorf("with 3 of 5 nodes up: %w", err)
	}
	s, err := locker.Inspect(ctx, "quickstart")
	if err != nil {
		return err
	}
	for _, n := range s.Nodes {
		switch {
		case n.Err != nil:
			fmt.Printf("  %-16s down: %v\n", n.Node, n.Err)
		default:
			fmt.Printf("  %-16s holds %s… (%s), ttl %v\n", n.Node, n.Token[:8], n.Metadata, n.TTL)
		}
	}
	fmt.Printf("  still locked by a majority, for %v more\n\n", s.Remaining())
	if err := l.Unlock(ctx); err != nil {
		return err
	}

	// 3. Kill a third: no majority, the lock is refused at once, with each
	// node's reason.
	_ = syscall.Kill(-servers[2].Process.Pid, syscall.SIGKILL)
	fmt.Println("killed node 3: only 2 of 5 left")
	start := time.Now()
	_, err = locker.TryLock(ctx, "quickstart")
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotObtained) || !errors.As(err, &qe) {
		return fmt.Errorf("want ErrNotObtained, got %v", err)
	}
	fmt.Printf("  refused after %v: %d of %d agreed, %d needed\n", time.Since(start).Round(time.Millisecond), qe.Granted, len(addrs), qe.Quorum)
	for _, n := range qe.Nodes {
		fmt.Printf("  %-16s %v\n", n.Node, n.Err)
	}
	return nil
}

// startServer starts redis-server on a free loopback port, in its own
// process group so that it can be killed with everything it started.
func startServer(dir string) (*exec.Cmd, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	port := fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--loglevel", "warning")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + port
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if line == "+PONG\r\n" {
				return cmd, addr, nil
			}
		}
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Wait()
	return nil, "", fmt.Errorf("redis-server on port %s did not answer", port)
}
