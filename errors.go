package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// Sentinel errors, for errors.Is. The words are those of the glossary in
// docs/design.md: a lock is obtained by a majority of grants; it ends when
// it is released, when it expires, or when it is taken over.
var (
	// ErrNotObtained: the operation did not win a majority of nodes in time.
	// From Lock or TryLock the lock is not held; from Extend it was not
	// extended (it keeps the validity it had, see Lock.Validity); from
	// Unlock the release was not confirmed by a majority (the keys not
	// confirmed expire at their TTL).
	ErrNotObtained = errors.New("redlock: not obtained")
	// ErrHeld is a node's reason in a QuorumError or an Event: another token
	// holds the key on that node. An uncontended attempt (TryLock, or a
	// Lock's first) is one SET NX per node, whose refusal does not say
	// more: there, ErrHeld also stands for a key kept free for the first
	// Lock call in its queue (ErrQueued from a queued attempt).
	ErrHeld = errors.New("redlock: held by another token")
	// ErrQueued is a node's reason in a QuorumError or an Event: the key is
	// free on that node, but other Lock calls wait for it (in this process
	// or another) and the first of them goes first (see [WithWaiterLease]).
	ErrQueued = errors.New("redlock: free, but others wait first")
	// ErrNoKey is a node's reason in a QuorumError or an Event: Extend or
	// Unlock found no key on that node. (If the node had granted the lock,
	// the lock has expired: see ErrExpired.)
	ErrNoKey = errors.New("redlock: no key")
	// ErrTakenOver: another token holds the key on a node that had granted
	// our lock. The lock has ended.
	ErrTakenOver = errors.New("redlock: lock taken over by another token")
	// ErrExpired: the lock's validity ran out, or its key is gone from a
	// node that had granted it (and no such node shows another token). The
	// lock has ended.
	ErrExpired = errors.New("redlock: lock expired")
	// ErrReleased: the lock was released (by Unlock, or by Close); Extend
	// and Unlock after that return it.
	ErrReleased = errors.New("redlock: lock released")
	// ErrClosed: the Client was closed; it makes no more calls to the nodes.
	// Work under Do that Close interrupted ends with it too.
	ErrClosed = errors.New("redlock: client closed")
	// ErrInvalidArgument: a key, option or argument was rejected before any
	// node was contacted.
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrNodeRestarted is a node's reason in a QuorumError when its grant
	// did not count: the node came back as a new process (a new run_id) less
	// than the restart guard's period ago, so it may have forgotten grants
	// it made to others before (see WithRestartGuard).
	ErrNodeRestarted = errors.New("redlock: node restarted recently; its grant does not count (WithRestartGuard)")
	// ErrUnusable: so many nodes answered with an error that waiting cannot
	// cure (a script the server cannot run, a missing ACL permission, a
	// read-only replica, a key of another type, a bad fence counter) that no
	// majority is possible until the nodes or the options change. Lock
	// returns it at once instead of waiting; the QuorumError names each
	// node's reply and what to change.
	ErrUnusable = errors.New("redlock: no majority possible until the nodes or options change")
	// ErrNoLeader: Election.Leader found that no leadership holds a
	// majority of nodes (none can, whatever the nodes that did not answer
	// hold), or that a candidate won and has not announced its term yet.
	ErrNoLeader = errors.New("redlock: no leader")
)

// QuorumError is the error of an operation that did not win a majority. It
// matches its sentinel (ErrNotObtained, ErrExpired or ErrTakenOver, and
// ErrUnusable when nodes fail for good) with errors.Is, and also the
// caller's context error, or ErrClosed, when that ended the operation. A
// single node's timeout or failure is listed in Nodes only, so
// errors.Is(err, context.DeadlineExceeded) is true only when the caller's
// own deadline passed.
type QuorumError struct {
	Op      string       // "lock", "extend" or "unlock"
	Quorum  int          // nodes needed
	Granted int          // nodes that agreed
	Nodes   []NodeResult // one per node that did not agree, in node order

	key    string // the lock key as the caller gave it, for the message
	err    error  // sentinel
	cause  error  // the caller's context error, or ErrClosed
	detail string // extra explanation, if any

	retryAfter time.Duration // lock: when the refusing holder's keys are gone at the latest; 0 unknown
	unusable   bool          // lock: ErrUnusable
}

// NodeResult is one node's part in an operation: in a QuorumError, a node
// that did not agree and why; in an Event, every node asked.
type NodeResult struct {
	Node string // the node's address, or "node N" for clients without one
	// Err is nil when the node agreed. Otherwise it is ErrHeld (another
	// token holds the key there), ErrQueued, ErrNoKey, ErrNodeRestarted, an error for
	// no reply in time, or the node's own error. In the acquire event of
	// a lock let in (Event.LetIn), nil is a node whose grant counts,
	// ErrQueued one that has not granted it (yet), and ErrNodeRestarted
	// one whose grant the restart guard does not count.
	Err     error
	Latency time.Duration // in events: from the start of the round to the node's answer; 0 without one
}

func (n NodeResult) text() string {
	if n.Err == nil {
		return n.Node + ": ok"
	}
	return n.Node + ": " + n.Err.Error()
}

// Error describes the operation, the reason, the count of agreeing nodes and
// each other node's answer.
func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "redlock: %s %q: %s: ", e.Op, e.key, strings.TrimPrefix(e.err.Error(), "redlock: "))
	if e.Granted+len(e.Nodes) == 0 {
		b.WriteString("no node asked")
	} else {
		fmt.Fprintf(&b, "%d of %d nodes agreed, %d needed", e.Granted, e.Granted+len(e.Nodes), e.Quorum)
	}
	if e.detail != "" {
		b.WriteString(" (" + e.detail + ")")
	}
	if e.cause != nil {
		b.WriteString(": " + e.cause.Error())
	}
	for _, n := range e.Nodes {
		b.WriteString("; " + n.text())
	}
	return b.String()
}

// Unwrap returns the sentinel, ErrUnusable when nodes fail for good, and
// the caller's context error (or ErrClosed) when that ended the operation.
func (e *QuorumError) Unwrap() []error {
	errs := []error{e.err}
	if e.unusable {
		errs = append(errs, ErrUnusable)
	}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
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

// quorumError describes a failed round over nodes (quorum of them make a
// majority), with already agreements
// from earlier rounds, as ErrNotObtained: the Lock's Extend and Unlock then
// tell from the nodes' answers whether the lock has ended (Lock.endedBy).
func quorumError(op, key string, nodes []node, quorum int, r *round, already int, ctx context.Context) *QuorumError {
	e := &QuorumError{Op: op, key: key, Quorum: quorum, Granted: r.tally.ok + already, err: ErrNotObtained, cause: ctx.Err()}
	for i, res := range r.results {
		if res.OK() {
			continue
		}
		e.Nodes = append(e.Nodes, NodeResult{Node: nodes[i].Name(), Err: reason(res)})
	}
	return e
}

// unusable returns, when so many nodes of the round failed for good that no
// majority is possible until something changes, what to change; else "".
func (r *round) unusable() string {
	var hints []string
	failed := 0
	for _, res := range r.results {
		hint, ok := permanent(res.Err)
		if !ok {
			continue
		}
		failed++
		if !slices.Contains(hints, hint) {
			hints = append(hints, hint)
		}
	}
	if failed <= r.tally.n-r.tally.need {
		return ""
	}
	return fmt.Sprintf("%d of %d nodes cannot grant it until that changes: %s", failed, r.tally.n, strings.Join(hints, "; "))
}
