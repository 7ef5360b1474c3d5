package wire

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file decodes what a node answers to each op into a Result.

// Status is one node's answer to one operation.
type Status int8

const (
	StatusFailed    Status = iota // the node failed or did not answer; see Result.Err
	StatusOK                      // acquire created the key; extend or release succeeded
	StatusRefreshed               // acquire found our own token (re-entry) and refreshed it
	StatusHeld                    // another token holds the key
	StatusAbsent                  // extend or release found no key: it had expired
	StatusQueued                  // acquire found the key free, but another waiter first in its queue
)

// Result is one node's outcome.
type Result struct {
	// Answered: the node's call returned within its round, with an answer
	// or an error. A node not Answered yet when the round was decided has
	// neither Answered nor err; one that missed the round's deadline has
	// err and not Answered.
	Answered bool
	Status   Status
	// Guarded: a grant from a node that restarted within the restart guard's
	// period; it does not count towards a majority, but its key is ours.
	Guarded bool
	// OwnAhead, from a one-key look at the queue: every waiter ahead of
	// the looking one (among the first 64) is of its own Client.
	OwnAhead bool
	// Kept, StatusFailed from a plain fenced acquire: its SET granted the
	// key, but the node could not hand out a token (Op.Regrant failed):
	// the key is ours, to take back.
	Kept bool
	// (The five fields above share one word.)
	PTTL  time.Duration // StatusHeld: holder's remaining TTL, −1 if none, PTTLUnknown from a plain acquire; StatusQueued: the first waiter's lease left
	Value string        // StatusHeld: the holder's token (acquire) or the key's value (inspect)
	Fence int64         // a fenced acquire's grant: the node's new fence counter
	RunID string        // acquire: the run_id of the server that answered, when known (internal/nodeio learns it)
	// Head: the first waiter in the key's queue, from a queue op, a
	// refusal (StatusQueued), a release or an inspect; its lease left is
	// pttl when the key is free (StatusQueued, or a queue op's
	// StatusAbsent).
	Head string
	// Detail is what few replies carry: a multi-key refusal's key, a
	// set's look at its queues, an inspect's counts; nil where the reply
	// carried none of it. Read it with Details. (Apart, so that the
	// Result of every other reply is 96 bytes: a round holds one per
	// node, and every delivery copies one several times.)
	Detail *Detail
	Err    error // StatusFailed only
}

func (r Result) OK() bool { return !r.Guarded && (r.Status == StatusOK || r.Status == StatusRefreshed) }

// Undecided reports whether the node had not answered when its round was
// decided: its reply is handled when it comes.
func (r Result) Undecided() bool { return !r.Answered && r.Err == nil }

// Decode turns the reply to an op of kind k into a Result.
func Decode(k Kind, cmd *redis.Cmd) Result {
	switch k {
	case OpInspect:
		return inspectReply(cmd.Slice())
	case OpAcquire, OpAcquireFenced:
		return acquireReply(cmd.Result())
	case OpAcquirePlain, OpAcquireFencedPlain: // the SET; see PlainFenced for the pair
		return plainReply(cmd.Result())
	case OpQueue:
		return queueReply(cmd.Slice())
	case OpRelease:
		if reply, ok := cmd.Val().([]any); ok { // {1, head}
			if len(reply) == 2 && reply[0] == int64(1) {
				if head, ok := reply[1].(string); ok {
					return Result{Status: StatusOK, Head: head}
				}
			}
			return Result{Err: fmt.Errorf("unexpected release reply %v", reply)}
		}
	}
	r, err := cmd.Int64()
	if err != nil {
		return Result{Err: err}
	}
	if k == OpFenceWrite {
		return fenceWriteReply(r)
	}
	return ownerReply(r)
}

// count32 is a count a node replied, as a Result holds it: clamped to
// int32's range.
func count32(n int64) int32 { return int32(min(max(n, math.MinInt32), math.MaxInt32)) }

// ErrLargerFence: a fence write-back found a larger token: a later holder
// has been handed one.
var ErrLargerFence = errors.New("redlock: a larger fencing token exists")

func fenceWriteReply(r int64) Result {
	switch r {
	case 1:
		return Result{Status: StatusOK}
	case 0:
		return Result{Err: ErrLargerFence}
	case -1:
		return Result{Status: StatusHeld}
	}
	return Result{Err: fmt.Errorf("unexpected fence write-back reply %d", r)}
}

// plainReply decodes a plain acquire's reply (SET … NX PX): OK, the key was
// free and is ours; nil, refused: another token holds the key, or it is
// Reserved for its queue, which the reply does not say, nor who holds it or
// for how long (no GET: a nil reply is an error to go-redis, which its
// retry classifier and connection pool then inspect at about 20
// allocations a node, so the grant must be the non-nil answer).
func plainReply(reply any, err error) Result {
	switch {
	case errors.Is(err, redis.Nil):
		return Result{Status: StatusHeld, PTTL: PTTLUnknown}
	case err != nil:
		return Result{Err: err}
	case reply == "OK":
		return Result{Status: StatusOK}
	}
	return Result{Err: fmt.Errorf("unexpected plain acquire reply %v", reply)}
}

// PlainFenced decodes the replies to a plain fenced acquire o
// (OpAcquireFencedPlain): its SET's and its ZADD's. again reports a grant
// whose ZADD did not take the proposal (the counter was at or above it, or
// is a string from before the sorted set), which the node must follow
// with o.Regrant() (re-entry: the node hands out its next value), whose
// reply stands for the pair's.
func PlainFenced(o *Op, set, zadd *redis.Cmd) (r Result, again bool) {
	r = plainReply(set.Result())
	if r.Status != StatusOK {
		return r, false
	}
	if n, err := zadd.Int64(); err != nil || n != 1 {
		return r, true
	}
	r.Fence = o.Fence
	return r, false
}

// PTTLUnknown is a refusal's PTTL when the node did not say it (a plain
// acquire's).
const PTTLUnknown = -2 * time.Millisecond

func acquireReply(reply any, err error) Result {
	if err != nil {
		return Result{Err: err}
	}
	switch r := reply.(type) {
	case int64:
		switch r {
		case 1:
			return Result{Status: StatusOK}
		case 2:
			return Result{Status: StatusRefreshed}
		}
	case []any:
		if len(r) == 3 {
			if res, ok := acquireReply3(r); ok {
				return res
			}
			break
		}
		if len(r) != 2 {
			break
		}
		code, ok := r[0].(int64)
		if !ok {
			break
		}
		switch second := r[1].(type) {
		case int64: // fenced grant: {1 or 2, fence}
			switch {
			case second <= 0 || second >= MaxFence:
			case code == 1:
				return Result{Status: StatusOK, Fence: second}
			case code == 2:
				return Result{Status: StatusRefreshed, Fence: second}
			}
		case string: // refusal: {−(PTTL+1), holder}
			switch {
			case code == 0:
				return Result{Status: StatusHeld, PTTL: -1, Value: second}
			case code < 0:
				return Result{Status: StatusHeld, PTTL: time.Duration(-code-1) * time.Millisecond, Value: second}
			}
		}
	}
	return Result{Err: fmt.Errorf("unexpected acquire reply %v", reply)}
}

// acquireReply3 decodes an acquire's refusal of three elements: the
// queue's, {−(head's lease left + 1), "", head}, or a multi-key one,
// {−(PTTL + 1), holder, KEYS index from 1}.
func acquireReply3(r []any) (Result, bool) {
	code, isCode := r[0].(int64)
	switch third := r[2].(type) {
	case string: // the queue's
		if isCode && code < 0 && third != "" {
			return Result{Status: StatusQueued, Head: third, PTTL: time.Duration(-code-1) * time.Millisecond}, true
		}
	case int64: // a multi-key refusal
		holder, isHolder := r[1].(string)
		if isCode && isHolder && code <= 0 && third >= 1 && third <= math.MaxInt32 {
			res := Result{Status: StatusHeld, PTTL: time.Duration(-code-1) * time.Millisecond, Value: holder}
			if third > 1 {
				res.Detail = &Detail{Key: int32(third) - 1}
			}
			if code == 0 {
				res.PTTL = -1
			}
			return res, true
		}
	}
	return Result{}, false
}

// queueReply decodes a queue op's {head or "", head's lease left ms, key's
// PTTL (−2: no key)[, holder's token[, keys held[, each key's holder]]]}:
// StatusAbsent (the key is free) with the head and its lease left as
// pttl, or StatusHeld with the head, the key's PTTL (−1 when it has none)
// and the holder (Value), when the op names it (a one-key look's; ""
// where readers hold), and the keys a set waits for (Waits) and their
// holders (Holders). The poll's judge decides what counts.
func queueReply(reply []any, err error) Result {
	if err != nil {
		return Result{Err: err}
	}
	if len(reply) >= 3 && len(reply) <= 7 {
		head, ok1 := reply[0].(string)
		left, ok2 := reply[1].(int64)
		pttl, ok3 := reply[2].(int64)
		var holder string
		var held uint64
		var own bool
		if len(reply) >= 4 {
			holder, _ = reply[3].(string)
		}
		if len(reply) >= 5 {
			switch x := reply[4].(type) {
			case string: // a set's: the keys it waits for
				for i := range min(len(x), 64) {
					if x[i] == '1' {
						held |= 1 << i
					}
				}
			case int64: // a one-key look's: only its own Client's waiters ahead
				own = x == 1
			}
		}
		var holders string
		if len(reply) >= 6 {
			holders, _ = reply[5].(string)
		}
		var granted, first uint64
		if len(reply) == 7 {
			mine, _ := reply[6].(string)
			for i := range min(len(mine), 64) {
				switch mine[i] {
				case 'g':
					granted |= 1 << i
				case 'f':
					first |= 1 << i
				}
			}
		}
		if ok1 && ok2 && ok3 {
			r := Result{Status: StatusHeld, Head: head, PTTL: time.Duration(pttl) * time.Millisecond, Value: holder, OwnAhead: own}
			if held != 0 || holders != "" || granted != 0 || first != 0 { // a set's look
				r.Detail = &Detail{Waits: held, Holders: holders, Granted: granted, First: first}
			}
			switch {
			case pttl == -2:
				r.Status, r.PTTL, r.Value = StatusAbsent, time.Duration(left)*time.Millisecond, ""
			case pttl < 0:
				r.PTTL = -1
			}
			return r
		}
	}
	return Result{Err: fmt.Errorf("unexpected queue reply %v", reply)}
}

// ownerReply decodes the 1 / 0 / −1 replies of extend and release.
func ownerReply(r int64) Result {
	switch r {
	case 1:
		return Result{Status: StatusOK}
	case 0:
		return Result{Status: StatusAbsent}
	case -1:
		return Result{Status: StatusHeld}
	}
	return Result{Err: fmt.Errorf("unexpected reply %d", r)}
}

func inspectReply(reply []any, err error) Result {
	if err != nil {
		return Result{Err: err}
	}
	if len(reply) < 2 || len(reply) > 7 { // nils may end the array
		return Result{Err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	pttl, ok := reply[1].(int64)
	if !ok {
		return Result{Err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	var fence int64
	if len(reply) >= 3 {
		if s, ok := reply[2].(string); ok {
			if fence, err = strconv.ParseInt(s, 10, 64); err != nil || fence < 0 {
				return Result{Err: fmt.Errorf("fence counter %q is not a whole number", s)}
			}
		}
	}
	res := Result{Status: StatusAbsent, Fence: fence}
	if len(reply) >= 4 {
		res.Detail = &Detail{}
		n, _ := reply[3].(int64)
		res.Detail.Waiting = count32(n)
	}
	if len(reply) >= 5 {
		res.Head, _ = reply[4].(string)
	}
	if len(reply) >= 6 {
		n, _ := reply[5].(int64)
		res.Detail.Readers = count32(n)
	}
	if len(reply) == 7 {
		n, _ := reply[6].(int64)
		res.Detail.WaitingReaders = count32(n)
	}
	if value, held := reply[0].(string); held {
		res.Status, res.Value, res.PTTL = StatusHeld, Unmark(value), time.Duration(pttl)*time.Millisecond
		if pttl < 0 {
			res.PTTL = -1
		}
	}
	return res
}

// EncodeValue is the key's value for a holder: the token, then NUL and the
// metadata when there is any.
func EncodeValue(token, metadata string) string {
	if metadata == "" {
		return token
	}
	return token + "\x00" + metadata
}
