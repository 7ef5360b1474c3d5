// Package redisproc starts and controls local redis-server processes on
// loopback: for the integration tests, the bench command (bench/) and the
// redlock command's demo.
//
// Every server runs in its own process group and is killed by the kernel if
// the process that started it dies first (Linux's parent-death signal), so
// a crashed test or benchmark leaves no server behind. Stop kills it at
// once; callers stop every server they started on every exit path.
package redisproc

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoServer is returned by Find when no redis-server binary is available.
var ErrNoServer = errors.New("redisproc: no redis-server binary (install Debian's redis-server package, or set REDIS_SERVER)")

// ErrPortTaken is returned by Start and Restart when another server
// answers on the port the new server was to listen on.
var ErrPortTaken = errors.New("redisproc: port taken by another server")

// Find returns the path of the redis-server binary: $REDIS_SERVER if set,
// else redis-server on PATH.
func Find() (string, error) {
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoServer, err)
	}
	return path, nil
}

// Config says how to start one server.
type Config struct {
	Bin  string   // redis-server binary; "" means Find's answer
	Port int      // loopback port; 0 picks a free one
	Dir  string   // data directory; "" means a new temporary one, removed by Close
	Env  []string // added to the server's environment
	Args []string // extra redis-server arguments, after the defaults

	// Sentinel starts a Redis Sentinel instead: SentinelConfig is written
	// to a sentinel.conf in Dir (Sentinel rewrites it as it learns).
	Sentinel       bool
	SentinelConfig string
}

// Server is one redis-server process.
type Server struct {
	Addr string // 127.0.0.1:port

	cfg    Config
	ownDir bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *LockedBuffer
	paused bool
	dead   bool
}

// Start starts a server and waits until it answers PING. With Port 0 it
// picks a free port, and tries another if that one was taken in between.
// No persistence is configured unless Args asks for it.
func Start(cfg Config) (*Server, error) {
	if cfg.Bin == "" {
		bin, err := Find()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	s := &Server{cfg: cfg}
	if s.cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "redisproc")
		if err != nil {
			return nil, err
		}
		s.cfg.Dir, s.ownDir = dir, true
	}
	if err := s.startRetrying(cfg.Port); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startRetrying starts the server on port (a free one when 0), up to 5
// times: a free port can be taken between picking and binding it.
func (s *Server) startRetrying(port int) error {
	var lastErr error
	for range 5 {
		p := port
		if p == 0 {
			var err error
			if p, err = FreePort(); err != nil {
				return err
			}
		}
		if lastErr = s.start(p); lastErr == nil || (port != 0 && errors.Is(lastErr, ErrPortTaken)) {
			return lastErr
		}
	}
	return lastErr
}

func (s *Server) start(port int) error {
	s.Addr = fmt.Sprintf("127.0.0.1:%d", port)
	args := []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--dir", s.cfg.Dir, "--daemonize", "no", "--loglevel", "warning"}
	if s.cfg.Sentinel {
		conf := filepath.Join(s.cfg.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); err != nil { // a restart keeps what Sentinel learnt
			if err := os.WriteFile(conf, []byte(s.cfg.SentinelConfig), 0o600); err != nil {
				return err
			}
		}
		args = append([]string{conf, "--sentinel"}, args...) // the config file comes first
	} else {
		args = append(args, "--save", "", "--appendonly", "no",
			"--enable-debug-command", "local") // DEBUG RELOAD, for LOADING replies
	}
	cmd := exec.Command(s.cfg.Bin, append(args, s.cfg.Args...)...)
	out := &LockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if s.cfg.Env != nil {
		cmd.Env = append(os.Environ(), s.cfg.Env...)
	}
	// Its own process group, and killed if this process dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.cfg.Bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.out, s.dead, s.paused = cmd, exited, out, false, false
	s.mu.Unlock()
	if err := s.waitReady(cmd.Process.Pid, 5*time.Second); err != nil {
		s.Stop()
		return err
	}
	return nil
}

// waitReady waits until the server answers PING on its address, and checks
// that the server answering is this one (process pid): when another server
// took the port between picking and binding it, this one fails to bind and
// exits, and a bare PING would have been answered by the other.
func (s *Server) waitReady(pid int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("redis-server exited: %s", s.out.String())
		default:
		}
		got, err := ProcessID(s.Addr)
		if err == nil && got != pid {
			return fmt.Errorf("%w: %s is served by process %d, not by the server started (process %d)", ErrPortTaken, s.Addr, got, pid)
		}
		if err == nil {
			err = Ping(s.Addr) // ready as before: PING refuses while a dataset loads
		}
		switch {
		case err == nil:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("no answer from %s: %v; output: %s", s.Addr, err, s.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Stop kills the server at once, like a crash (SIGKILL to its process
// group, resuming nothing first), and waits for it to exit. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
	s.dead, s.paused = true, false
}

// Close stops the server and removes its data directory if Start made it.
func (s *Server) Close() {
	s.Stop()
	if s.ownDir {
		_ = os.RemoveAll(s.cfg.Dir)
	}
}

// Restart stops the server and starts a new one on the same port and data
// directory at once, with a new run_id. Without persistence the new server
// has no keys, as a crashed Redis without an AOF has none.
func (s *Server) Restart() error {
	s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	p, err := strconv.Atoi(port)
	if err != nil {
		return fmt.Errorf("redisproc: restart: address %q: %w", s.Addr, err)
	}
	return s.startRetrying(p)
}

// Pause freezes the server with SIGSTOP: it accepts TCP connections (the
// kernel does) but answers nothing until Resume.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead || s.cmd == nil {
		return errors.New("redisproc: pause: server not running")
	}
	if err := syscall.Kill(s.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		return err
	}
	s.paused = true
	return nil
}

// Resume undoes Pause.
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused && !s.dead {
		_ = syscall.Kill(s.cmd.Process.Pid, syscall.SIGCONT)
	}
	s.paused = false
}

// Running reports whether the server process is alive (paused or not).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil && !s.dead
}

// Output returns what the server wrote to stdout and stderr.
func (s *Server) Output() string {
	s.mu.Lock()
	out := s.out
	s.mu.Unlock()
	if out == nil {
		return ""
	}
	return out.String()
}

// CPUTime returns the CPU time (user and system) the server process has
// used, from /proc (Linux only).
func (s *Server) CPUTime() (time.Duration, error) {
	s.mu.Lock()
	cmd, dead := s.cmd, s.dead
	s.mu.Unlock()
	if cmd == nil || dead {
		return 0, errors.New("redisproc: server not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, in clock ticks (USER_HZ, 100
	// on Linux).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("redisproc: unexpected /proc stat %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("redisproc: unexpected /proc stat %q", b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * (time.Second / 100), nil
}
