package nodeio

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBatchContext: a stream's batch context keeps the context contract
// across the batches it is reused for: the deadline is the batch's, Done is
// closed and Err set once it passes, and a batch that ends closes the Done
// it handed out, so that nothing waits on a finished batch; the next batch
// starts afresh.
func TestBatchContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c batchContext
		for batch := range 3 {
			d := time.Now().Add(100 * time.Millisecond)
			c.begin(d)
			got, ok := c.Deadline()
			require.True(t, ok)
			require.Equal(t, d, got)
			require.NoError(t, c.Err(), "batch %d", batch)
			require.Nil(t, c.Value("any"))
			done := c.Done()
			require.False(t, closed(done), "batch %d: done before its deadline", batch)
			if batch == 1 { // ends early
				c.end()
				require.True(t, closed(done), "an ended batch's Done is open")
				require.ErrorIs(t, c.Err(), context.Canceled)
				continue
			}
			time.Sleep(100*time.Millisecond - time.Nanosecond)
			require.False(t, closed(done))
			time.Sleep(time.Nanosecond)
			synctest.Wait() // the timer's goroutine
			require.True(t, closed(done), "batch %d: Done open at its deadline", batch)
			require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
			c.end()
		}
		// A context derived from a batch's ends when the batch does.
		c.begin(time.Now().Add(time.Second))
		child, cancel := context.WithCancel(&c)
		defer cancel()
		c.end()
		synctest.Wait()
		require.ErrorIs(t, child.Err(), context.Canceled)
	})
}

// closed is a select on ch with a default case.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
