package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// bare is the fastest quorum fan-out of the floor's commands (SET NX PX,
// then the EVALSHA compare-and-delete) that we could write on plain
// go-redis, the uncontended cycle's reference: one long-lived worker per
// node, fed through a channel, so no goroutine is started per call; a
// worker that finds several commands waiting sends them as one pipeline,
// so concurrent callers share round trips as redlock's per-node streams
// do. A lock is counted when a majority set the key; acquire and release
// each return at the majority (3 of 5), as redlock's Lock and Unlock do.
// A node's release cannot overtake its acquire: its worker sends them in
// order. Clients have the README's options, as redlock's do.
type bare struct {
	clients []*redis.Client
	jobs    []chan bareJob
	stop    chan struct{}
	wg      sync.WaitGroup
	sha     string
}

// bareJob is one command for one node; the worker answers on reply.
type bareJob struct {
	release    bool
	key, token string
	reply      chan<- bool // true: set (acquire) or deleted (release)
}

// bareBatch is the most commands a worker sends in one pipeline.
const bareBatch = 128

func bareContender(n int) contender {
	return contender{Name: fmt.Sprintf("bare go-redis fan-out, %d nodes, returns at %d", n, n/2+1), Lib: "bare", Nodes: n,
		build: func(addrs []string, _ *atomic.Int64) (instance, error) {
			return newBare(readmeClients(addrs[:n]))
		}}
}

func newBare(clients []*redis.Client) (*bare, error) {
	b := &bare{clients: clients, stop: make(chan struct{})}
	for _, c := range clients {
		sha, err := releaseIfOwner.Load(context.Background(), c).Result()
		if err != nil {
			closeClients(clients)
			return nil, err
		}
		b.sha = sha
	}
	for _, c := range clients {
		jobs := make(chan bareJob, bareBatch)
		b.jobs = append(b.jobs, jobs)
		b.wg.Add(1)
		go b.work(c, jobs)
	}
	return b, nil
}

// work sends a node's commands in the order they came, as many as are
// waiting in one pipeline, until close.
func (b *bare) work(c *redis.Client, jobs <-chan bareJob) {
	defer b.wg.Done()
	ctx := context.Background()
	batch := make([]bareJob, 0, bareBatch)
	cmds := make([]redis.Cmder, 0, bareBatch)
	for {
		select {
		case j := <-jobs:
			batch = append(batch[:0], j)
		case <-b.stop:
			return
		}
	more:
		for len(batch) < bareBatch {
			select {
			case j := <-jobs:
				batch = append(batch, j)
			default:
				break more
			}
		}
		if len(batch) == 1 {
			batch[0].reply <- b.do(ctx, c, batch[0])
			continue
		}
		p := c.Pipeline()
		cmds = cmds[:0]
		for _, j := range batch {
			if j.release {
				cmds = append(cmds, p.EvalSha(ctx, b.sha, []string{j.key}, j.token))
			} else {
				cmds = append(cmds, p.SetNX(ctx, j.key, j.token, 10*time.Second))
			}
		}
		_, _ = p.Exec(ctx)
		for i, j := range batch {
			j.reply <- yes(cmds[i])
		}
	}
}

func (b *bare) do(ctx context.Context, c *redis.Client, j bareJob) bool {
	if j.release {
		return yes(c.EvalSha(ctx, b.sha, []string{j.key}, j.token))
	}
	return yes(c.SetNX(ctx, j.key, j.token, 10*time.Second))
}

// yes reads a SET NX's or a release's answer: set, or deleted.
func yes(cmd redis.Cmder) bool {
	switch c := cmd.(type) {
	case *redis.BoolCmd:
		v, err := c.Result()
		return err == nil && v
	case *redis.Cmd:
		v, err := c.Int()
		return err == nil && v == 1
	}
	return false
}

// fan sends the command to every node and reports whether a majority
// answered yes, once that is decided; the other answers land in the
// buffered channel.
func (b *bare) fan(release bool, key, token string) bool {
	n := len(b.jobs)
	replies := make(chan bool, n)
	for _, jobs := range b.jobs {
		jobs <- bareJob{release: release, key: key, token: token, reply: replies}
	}
	granted, refused := 0, 0
	for granted < n/2+1 && refused < n-n/2 {
		if <-replies {
			granted++
		} else {
			refused++
		}
	}
	return granted > n/2
}

func (b *bare) cycle(ctx context.Context, key string) error {
	unlock, err := b.lock(ctx, key)
	if err != nil {
		return err
	}
	return unlock(ctx)
}

func (b *bare) lock(_ context.Context, key string) (func(context.Context) error, error) {
	if !b.fan(false, key, "token") {
		b.fan(true, key, "token")
		return nil, errNotObtained
	}
	return func(context.Context) error {
		if !b.fan(true, key, "token") {
			return errNotObtained
		}
		return nil
	}, nil
}

// close stops the workers once every command given to them is sent, so
// that no key is left behind.
func (b *bare) close() {
	for _, jobs := range b.jobs {
		for len(jobs) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	close(b.stop)
	b.wg.Wait()
	closeClients(b.clients)
}
