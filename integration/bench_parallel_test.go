package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
)

// BenchmarkLockUnlockParallel is the throughput measure of make bench in a
// testing.B: 32 goroutines (16 per CPU on 2 cores, as b.SetParallelism
// counts them), each locking and unlocking keys of its own through one
// Client on 5 nodes with the README's node options. Its CPU profile
// (-cpuprofile) is the client's side of a cycle alone: the servers run in
// processes of their own; client-cpu-ns/op is that side's CPU per cycle
// (the process's, from getrusage), make bench's "client CPU per cycle".
func BenchmarkLockUnlockParallel(b *testing.B) {
	nodes := StartNodes(b, 5)
	c := newClient(b, Clients(b, nodes, readmeNodes))
	var worker atomic.Int64
	b.SetParallelism(16)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		ctx, w := context.Background(), worker.Add(1)
		for i := 0; pb.Next(); i++ {
			l, err := c.Lock(ctx, fmt.Sprintf("par:%d:%d", w, i%64))
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "client-cpu-ns/op")
}
