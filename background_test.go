package redlock

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestBackgroundGrowsWhileWaited: a goroutine started while Wait waits is
// waited for too, and one started from a count of zero while Wait runs is
// no race (a sync.WaitGroup's Add from zero during Wait is one: the
// simulator's Close mid-run found it under -race).
func TestBackgroundGrowsWhileWaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b background
		start := time.Now()
		b.Add(1)
		waited := make(chan time.Duration)
		go func() { b.Wait(); waited <- time.Since(start) }()
		synctest.Wait() // Wait is waiting
		b.Go(func() { time.Sleep(time.Second) })
		b.Done()
		if d := <-waited; d != time.Second {
			t.Fatalf("Wait returned after %v, before the goroutine started while it waited ended (1s)", d)
		}
		go b.Wait()
		b.Go(func() {})
		b.Wait()
	})
}

func TestBackgroundWaitWhenIdle(t *testing.T) {
	var b background
	b.Wait() // returns at once
	b.Add(1)
	done := make(chan struct{})
	go func() { b.Wait(); close(done) }()
	select {
	case <-done:
		t.Fatal("Wait returned with one counted")
	case <-time.After(10 * time.Millisecond):
	}
	b.Done()
	<-done
}

// TestBackgroundWaitMeetsTheLastDone: a Done that takes the count to zero
// while Wait is getting ready to wait wakes it all the same (the count is
// atomic, and Wait looks again once it has said it waits). A lost wake-up
// would hang this test.
func TestBackgroundWaitMeetsTheLastDone(t *testing.T) {
	var b background
	for range 20000 {
		b.Add(1)
		go b.Done()
		b.Wait()
	}
}
