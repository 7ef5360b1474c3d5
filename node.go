package redlock

import (
	"strings"

	"github.com/redlock-go/redlock/internal/nodeio"
	"github.com/redlock-go/redlock/internal/wire"
)

// reason is why the node did not agree, for a NodeResult; nil if it did.
func reason(r wire.Result) error {
	switch {
	case r.OK():
		return nil
	case r.Guarded:
		return ErrNodeRestarted
	case r.Status == wire.StatusHeld:
		return ErrHeld
	case r.Status == wire.StatusQueued:
		return ErrQueued
	case r.Status == wire.StatusAbsent:
		return ErrNoKey
	case r.Undecided():
		return errUndecided
	}
	return r.Err
}

// node is everything the library asks of one Redis master.
type node interface {
	// Start sends c.o to the node and returns at once; the node hands its
	// result to c.To.Deliver(c.i, ·) exactly once: when it answered, when
	// the call failed, or when the call ended before it could be sent.
	Start(c nodeio.Call)
	Name() string
	// Watch subscribes to channel, calls ready once the node has confirmed
	// the subscription (never, if it does not), and calls deliver for each
	// message until stop is called; stop waits for the subscription's
	// goroutine to end.
	Watch(channel string, deliver func(channel, payload string), ready func()) (stop func())
}

// permanent reports whether a node's error is one that waiting cannot cure,
// and what would cure it: Lock stops waiting when such errors leave no
// majority possible (ErrUnusable).
func permanent(err error) (hint string, ok bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	has := func(prefix string) bool { return strings.HasPrefix(msg, prefix) }
	switch {
	case has("NOGUARD"):
		return "the restart guard needs INFO server: allow INFO to the node's ACL user, or pass WithRestartGuard(0) (test servers such as miniredis; nodes with appendfsync always)", true
	case has("NOPERM"), strings.Contains(msg, "The user executing the script can't"):
		return "the node's ACL user lacks a permission the scripts need (docs/operations.md has the ACL line)", true
	case has("READONLY"):
		return "the node is a read-only replica: give redlock masters", true
	case has("WRONGTYPE"):
		return "the lock's key holds another type on the node: delete it, or choose another WithKeyPrefix", true
	case has("FENCE"):
		return "a fence counter is unusable: fix or delete it (docs/fencing.md)", true
	case has("NOAUTH"), has("WRONGPASS"):
		return "the node refuses the client's credentials", true
	case strings.Contains(msg, "unknown command"), strings.Contains(msg, "Unknown Redis command"),
		strings.Contains(msg, "Error compiling script"), has("ERR user_script"):
		return "the node cannot run the library's Lua scripts", true
	}
	return "", false
}
