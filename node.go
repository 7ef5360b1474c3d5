package redlock

import (
	"github.com/redlock-go/redlock/internal/nodeio"
)

// node is everything the library asks of one Redis master.
type node interface {
	// Start sends c.Op to the node and returns at once; the node hands its
	// result to c.To.Deliver(c.Index, ·) exactly once: when it answered,
	// when the call failed, or when the call ended before it could be sent.
	Start(c nodeio.Call)
	Name() string
	// Watch subscribes to channel, calls ready once the node has confirmed
	// the subscription (never, if it does not), and calls deliver for each
	// message until stop is called; stop waits for the subscription's
	// goroutine to end.
	Watch(channel string, deliver func(channel, payload string), ready func()) (stop func())
}
