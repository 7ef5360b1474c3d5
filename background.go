package redlock

import "sync"

// background counts a Client's goroutines that outlive the calls that
// started them (late replies of a round, the nodes' stream writers), so
// that Close can wait for them. Unlike a sync.WaitGroup, it may grow from
// zero while Close waits: a Lock in flight when Close is called starts the
// handler of its round's late replies then (which takes back grants that
// come too late), and Close waits for that one too. (With a WaitGroup that
// Add raced with Close's Wait: the simulator's Close mid-run found it,
// under -race.)
type background struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to zero, if Wait is waiting
}

// Add adds delta to the count.
func (b *background) Add(delta int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += delta
	if b.n < 0 {
		panic("redlock: background count below zero")
	}
	if b.n == 0 && b.idle != nil {
		close(b.idle)
		b.idle = nil
	}
}

// Done subtracts one from the count.
func (b *background) Done() { b.Add(-1) }

// Go runs f on a goroutine of its own, counted.
func (b *background) Go(f func()) {
	b.Add(1)
	go func() {
		defer b.Done()
		f()
	}()
}

// Wait waits until the count is zero.
func (b *background) Wait() {
	b.mu.Lock()
	if b.n == 0 {
		b.mu.Unlock()
		return
	}
	if b.idle == nil {
		b.idle = make(chan struct{})
	}
	idle := b.idle
	b.mu.Unlock()
	<-idle
}
