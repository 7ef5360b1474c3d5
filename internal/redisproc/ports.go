package redisproc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file is the helpers around a server: free ports, who holds a
// port, whether something answers there, and a buffer for its output.

// handedOut holds every port FreePort returned in this process.
var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a loopback TCP port that was free a moment ago and that
// it has not returned before in this process. The kernel can give the same
// free port to two callers that ask at once (one caller closes its probe
// before its server binds); about one start of five servers in a thousand
// did so here, and two nodes of one test then shared a port. Another
// process can still take the port before it is bound: Start checks that
// the server answering is the one it started.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !handedOut.ports[p] {
			if handedOut.ports == nil {
				handedOut.ports = make(map[int]bool)
			}
			handedOut.ports[p] = true
			return p, nil
		}
	}
	return 0, errors.New("redisproc: no loopback port this process has not used")
}

// ProcessID asks the server at addr for its process id (INFO server),
// speaking RESP directly, as Ping does.
func ProcessID(addr string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("INFO server\r\n")); err != nil {
		return 0, err
	}
	r := bufio.NewReader(c)
	head, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if !strings.HasPrefix(head, "$") || err != nil || n < 0 {
		return 0, fmt.Errorf("INFO: got %q", head)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "process_id:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, errors.New("INFO server has no process_id")
}

// Ping speaks RESP directly, so that readiness checks leave no client
// behind.
func Ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("got %q", line)
	}
	return nil
}

// LockedBuffer is a bytes.Buffer that is safe to read while a process
// writes its output to it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
