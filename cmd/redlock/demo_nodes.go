package main

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/alicebob/miniredis/v2"
	"github.com/redlock-go/redlock/internal/redisproc"
)

// This file is the demo's nodes: embedded or redis-server processes,
// killed and restored as the demo's script says.

// demoNode is one lock node of the demo: killed like a crash, and restored
// with its data, as a Redis restarting from its AOF would be.
type demoNode interface {
	addr() string
	kill()
	restore() error
	close()
}

// embedded is a node served by miniredis inside this process. miniredis
// expires keys only when told that time passed, so a clock goroutine
// fast-forwards it in step with real time.
type embedded struct{ m *miniredis.Miniredis }

func (e embedded) addr() string   { return e.m.Addr() }
func (e embedded) kill()          { e.m.Close() }
func (e embedded) restore() error { return e.m.Restart() }
func (e embedded) close()         { e.m.Close() }

// process is a redis-server process, with every write fsynced to its AOF.
type process struct{ s *redisproc.Server }

func (p process) addr() string   { return p.s.Addr }
func (p process) kill()          { p.s.Stop() }
func (p process) restore() error { return p.s.Restart() }
func (p process) close()         { p.s.Close() }

// startNodes starts the nodes: redis-server processes when asked for, or
// when redis-server is installed and embedded nodes were not asked for.
func (d *demo) startNodes() error {
	useProcesses := d.cfg.redisServer
	if !d.cfg.redisServer && !d.cfg.embedded {
		_, err := redisproc.Find()
		useProcesses = err == nil
	}
	for range d.cfg.nodes {
		var n demoNode
		if useProcesses {
			s, err := redisproc.Start(redisproc.Config{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
			if err != nil {
				return err
			}
			n = process{s}
		} else {
			m := miniredis.NewMiniRedis()
			if err := m.Start(); err != nil {
				return err
			}
			n = embedded{m}
		}
		d.nodes = append(d.nodes, n)
	}
	d.up = make([]atomic.Bool, len(d.nodes))
	for i := range d.up {
		d.up[i].Store(true)
	}
	if useProcesses {
		d.kind = "redis-server processes (appendfsync always)"
	} else {
		d.kind = "embedded nodes (miniredis, in this process; no redis-server needed)"
	}
	return nil
}

func (d *demo) killNodes(from, to int) {
	for i := from; i < to; i++ {
		d.up[i].Store(false)
		d.nodes[i].kill()
	}
}

// nodeList names nodes from..to-1, counting from 1 as shown.
func nodeList(from, to int) string {
	var names []string
	for i := from; i < to; i++ {
		names = append(names, fmt.Sprint(i+1))
	}
	if len(names) == 1 {
		return "node " + names[0]
	}
	return "nodes " + strings.Join(names, ", ")
}

func (d *demo) upCount() int {
	n := 0
	for i := range d.up {
		if d.up[i].Load() {
			n++
		}
	}
	return n
}
