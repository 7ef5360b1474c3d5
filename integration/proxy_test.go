package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Proxy is an in-process TCP proxy (toxiproxy) in front of one node, on a
// loopback port, through which a test adds latency or cuts the link.
type Proxy struct {
	Addr  string
	proxy *toxiproxy.Proxy
	mu    sync.Mutex
	toxic string // the toxic in place, if any
}

// ProxyNodes puts a proxy in front of every node; they stop with the test.
func ProxyNodes(t testing.TB, nodes []*Node) []*Proxy {
	t.Helper()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxies := make([]*Proxy, len(nodes))
	for i, n := range nodes {
		p := toxiproxy.NewProxy(server, fmt.Sprintf("node%d", i), "127.0.0.1:0", n.Addr)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Stop)
		proxies[i] = &Proxy{Addr: p.Listen, proxy: p}
	}
	return proxies
}

// Reach returns nodes as seen through proxies: their proxies' addresses.
func Reach(proxies []*Proxy) []*Node {
	nodes := make([]*Node, len(proxies))
	for i, p := range proxies {
		nodes[i] = &Node{Addr: p.Addr}
	}
	return nodes
}

// Latency delays everything the node sends by ms ± jitter milliseconds.
func (p *Proxy) Latency(t testing.TB, ms, jitter int) {
	p.set(t, fmt.Sprintf(`{"name":"fault","type":"latency","stream":"downstream","attributes":{"latency":%d,"jitter":%d}}`, ms, jitter))
}

// Partition cuts the link: connections stay open, and nothing passes.
func (p *Proxy) Partition(t testing.TB) {
	p.set(t, `{"name":"fault","type":"timeout","stream":"downstream","attributes":{"timeout":0}}`)
}

// Heal removes the fault.
func (p *Proxy) Heal(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.toxic != "" {
		if err := p.proxy.Toxics.RemoveToxic(context.Background(), p.toxic); err != nil {
			t.Error(err)
		}
		p.toxic = ""
	}
}

func (p *Proxy) set(t testing.TB, toxic string) {
	t.Helper()
	p.Heal(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	w, err := p.proxy.Toxics.AddToxicJson(strings.NewReader(toxic))
	if err != nil {
		t.Fatal(err)
	}
	p.toxic = w.Name
}
