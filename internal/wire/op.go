package wire

import (
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Op is one operation on one key (or a multi-key lock's keys), prepared
// once per round and sent to every node. Its fields say what it asks;
// encode turns them into the wire arguments, once, shared by every node's
// command (go-redis only reads them), and the in-memory test nodes read
// the same fields.
type Op struct {
	Kind              Kind
	Key, Token, Value string        // key: the lock key, or a multi-key lock's first key (Cluster routing)
	Keys              []string      // a multi-key lock's keys (acquires, extend, release, fence write-back); nil for one key
	Mode              Mode          // the primitive: selects its scripts
	TTL               time.Duration // TTL, or cooldown for release
	Fence             int64         // OpFenceWrite: the token to write back; OpAcquireFenced: the proposal; OpProclaim: the term; OpRelease (a one-key mutex's or a writer's): the proposal a fenced waiter it grants gets
	Quiet             bool          // OpQueue: leave the queue
	Wake              any           // OpRelease, OpQueue: the wake channels' prefix (a string); nil: wake nobody; an acquire's: its take-backs
	Place             *Place        // acquires: the caller's place in the wait queue, if it has one; OpQueue: whose
	// Seq, OpQueue (a look of a reader a release may let in): the look's
	// number, which the node keeps beside the place, and names when a
	// release lets the reader in (see queueLua); 0: none.
	Seq int64
	// WakeOnly, OpRelease: the release wakes the first waiter and never
	// grants it the key (see queueLua's grant): an Unlock that sends its
	// own Client's next waiter's attempt right behind it (the hand-over
	// inside one Client), which takes the key, and a failed attempt's
	// take-back, which released no lock anyone held: its grants would
	// split the key between the waiter it woke on some nodes and the one
	// the holder's own releases grant on others, each short of a majority
	// until the grants lapse.
	WakeOnly bool
	// KeepPlace, OpRelease of a set's keys granted to its place (its ID
	// the token), with WakeOnly: the set gives back grants that can never
	// make a majority, and keeps its place in every key's queue, so that
	// a key it waits for stays reserved for its queue (an unqueued attempt
	// would otherwise take it); each key granted to it is reserved for its
	// queue's first waiter, which is woken.
	KeepPlace bool

	wire    []any     // EVALSHA sha numkeys keys… args…, built by encode, in argv when it fits
	argv    [14]any   // (the Op's own: an Op is one allocation, 472 bytes)
	pair    []any     // OpAcquireFencedPlain: the ZADD sent after wire's SET, in argv after it
	regrant bool      // follows a plain fenced grant on its node (Regrant)
	keybuf  [2]string // the KEYS of a one-key op
	residue int       // OpAcquireFenced: the index in wire of the node's residue (ARGV[4])
}

// Place is a waiter's place in a key's wait queue (see queueLua): its ID
// and ticket, the same on every node, and how long its entry lives there
// without a refresh.
type Place struct {
	ID     string
	Ticket int64
	Lease  time.Duration
}

// Time returns the place's ticket as a Time (it is one, in µs since the
// epoch), zero for none.
func (p *Place) Time() time.Time {
	if p == nil {
		return time.Time{}
	}
	return time.UnixMicro(p.Ticket)
}

// MS is the place's lease in ms.
func (p *Place) MS() int64 { return p.Lease.Milliseconds() }

func NewOp(kind Kind, key, token, value string, ttl time.Duration) *Op {
	return &Op{Kind: kind, Key: key, Token: token, Value: value, TTL: ttl}
}

// NewFenceWrite prepares the write-back of fencing token t for key (or a
// multi-key lock's keys), held with token.
func NewFenceWrite(key string, keys []string, token string, t int64) *Op {
	return &Op{Kind: OpFenceWrite, Key: key, Keys: keys, Token: token, Fence: t}
}

// Mode is the primitive an op is for, which selects its script: what a
// lock's holder holds.
type Mode uint8

const (
	ModeMutex    Mode = iota // one key, one holder: a mutex, a semaphore's slot
	ModeElection             // an election's lock: a mutex whose fenced grant announces its leader
	ModeSet                  // a multi-key lock: every key of Op.Keys, or none
	ModeWrite                // a read-write lock's writer: the key, where no reader holds
	ModeRead                 // a reader: an entry in the key's readers set
	modeCount
)

// Encode builds the wire arguments: the one place that knows each script's
// KEYS and ARGV layout (documented with the scripts above). It is called
// once per round, before the op is shared.
func (o *Op) Encode() {
	ms := o.TTL.Milliseconds()
	keys := o.Keys // a multi-key lock's; the ARGV are those of one key
	if keys == nil {
		o.keybuf[0] = o.Key
		keys = o.keybuf[:1]
	}
	// withFence is a one-key op's KEYS with the key's fence counter.
	withFence := func() []string {
		o.keybuf[0], o.keybuf[1] = o.Key, FenceKey(o.Key)
		return o.keybuf[:2]
	}
	switch o.Kind {
	case OpAcquire: // a caller not queued sends no place: the script only checks that there is no queue
		token, value := o.boxed()
		if p := o.Place; p != nil {
			o.set(keys, token, value, ms, p.ID, p.Ticket, p.MS())
		} else {
			o.set(keys, token, value, ms)
		}
	case OpAcquirePlain, OpAcquireFencedPlain:
		o.plain(ms)
	case OpExtend:
		o.set(keys, o.Token, ms)
	case OpRelease:
		o.release(keys, ms)
	case OpInspect:
		o.set(withFence())
	case OpAcquireFenced: // the residue (ARGV[4]) is per node: see Args
		if o.Keys == nil {
			keys = withFence() // a multi-key script names its counters itself
		}
		o.residue = 3 + len(keys) + 3
		if p := o.Place; p != nil {
			o.set(keys, o.Token, o.Value, ms, 0, FenceModulus, o.Fence, p.ID, p.Ticket, p.MS())
		} else {
			o.set(keys, o.Token, o.Value, ms, 0, FenceModulus, o.Fence)
		}
	case OpFenceWrite:
		o.set(keys, o.Fence, o.Token)
	case OpProclaim: // the notice's payload is the term: see Election
		o.set(keys, o.Token, o.Value, o.Fence)
	case OpQueue:
		var ticket any = o.Place.Ticket
		if o.Quiet {
			ticket = 0
		}
		switch {
		case o.Seq > 0 && o.Value != "": // a place with metadata (a candidate's value): kept for a release that grants it
			o.set(keys, o.Place.ID, ticket, o.Place.MS(), o.wakeArg(), o.Seq, o.Value)
		case o.Seq > 0:
			o.set(keys, o.Place.ID, ticket, o.Place.MS(), o.wakeArg(), o.Seq)
		default:
			o.set(keys, o.Place.ID, ticket, o.Place.MS(), o.wakeArg())
		}
	}
}

// release makes a release's arguments (see releaseSrc's ARGV).
func (o *Op) release(keys []string, ms int64) {
	switch {
	case o.WakeOnly && o.KeepPlace:
		o.set(keys, o.Token, ms, o.wakeArg(), 1, 0, 1)
	case o.WakeOnly:
		o.set(keys, o.Token, ms, o.wakeArg(), 1)
	case o.Fence != 0: // a fenced waiter's token, if the release grants it (set on a one-key mutex's or writer's release only)
		o.set(keys, o.Token, ms, o.wakeArg(), 0, o.Fence)
	case releasesOneKey[o.Mode] && IsPlaceID(o.Token):
		// releaseSrc's fast path is for a token that is no place's ID:
		// ARGV[4] (not a hand-over) keeps a place's release off it.
		o.set(keys, o.Token, ms, o.wakeArg(), 0)
	case releasesOneKey[o.Mode] && ms == 0 && o.wakesByKey():
		o.set(keys, o.Token) // releaseSrc's short form: two arguments fewer for the server to read and make Lua strings of
	default:
		o.set(keys, o.Token, ms, o.wakeArg())
	}
}

// plainArgs is how many arguments a plain acquire's SET has, and its
// ZADD: the two share the op's argv, each in a part of its own.
const plainArgs = 6

// plain makes the commands of a plain acquire (no script: see
// OpAcquirePlain and OpAcquireFencedPlain).
func (o *Op) plain(ms int64) {
	_, value := o.boxed()
	o.wire = append(o.argv[:0:plainArgs], "set", o.Key, value, "nx", "px", ms)
	if o.Kind == OpAcquireFencedPlain {
		o.pair = append(o.argv[plainArgs:plainArgs:2*plainArgs], "zadd", FenceKey(o.Key), "gt", "ch", o.Fence, "c")
	}
}

// Scripted returns the acquire script's op for a plain acquire (see
// OpAcquirePlain, OpAcquireFencedPlain), encoded: for a node that has not
// yet shown that it runs the library's scripts, and for a fenced grant the
// node must hand out its own value for (PlainFenced). Any other op is
// returned as it is.
func (o *Op) Scripted() *Op {
	kind := OpAcquire
	switch o.Kind {
	case OpAcquirePlain:
	case OpAcquireFencedPlain:
		kind = OpAcquireFenced
	default:
		return o
	}
	t := &Op{Kind: kind, Key: o.Key, Token: o.Token, Value: o.Value, Keys: o.Keys, Mode: o.Mode, TTL: o.TTL, Wake: o.Wake, Fence: o.Fence}
	t.Encode()
	return t
}

// Regrant is the op that follows a plain fenced grant whose ZADD did not
// take the proposal (PlainFenced's again): o.Scripted(), which re-enters
// the key the SET granted and hands out the node's next value. If it fails
// (a bad counter), its Result says the key is Kept.
func (o *Op) Regrant() *Op {
	t := o.Scripted()
	t.regrant = true
	return t
}

// Decode turns the node's reply to o into a Result (see Decode).
func (o *Op) Decode(cmd *redis.Cmd) Result {
	r := Decode(o.Kind, cmd)
	if o.regrant && r.Status == StatusFailed {
		r.Kept = true
	}
	return r
}

// Pair is the second command of an op sent as two (OpAcquireFencedPlain),
// nil for any other.
func (o *Op) Pair() []any { return o.pair }

// boxed returns the op's token and value as arguments: boxed once when
// they are the same string (a holder without metadata), not twice.
func (o *Op) boxed() (token, value any) {
	token = o.Token
	if o.Value == o.Token {
		return token, token
	}
	return token, o.Value
}

// set makes the wire arguments: EVALSHA, the script's SHA1, keys and args.
func (o *Op) set(keys []string, args ...any) {
	w := o.argv[:0]
	if n := 3 + len(keys) + len(args); n > len(o.argv) {
		w = make([]any, 0, n)
	}
	w = append(w, "evalsha", o.script().sha, len(keys))
	for _, k := range keys {
		w = append(w, k)
	}
	o.wire = append(w, args...)
}

// wakesByKey reports whether the op's wake prefix is the one releaseSrc's
// short form derives from the key: the key's part before its first '{'
// (a Client's key prefix, which has no braces) followed by "wake:".
func (o *Op) wakesByKey() bool {
	w, ok := o.Wake.(string)
	i := strings.IndexByte(o.Key, '{')
	return ok && i >= 0 && len(w) == i+len(WakeInfix) && w[:i] == o.Key[:i] && w[i:] == WakeInfix
}

// WakeInfix follows the key prefix in the name of a Client's wake
// channel: prefix + WakeInfix + the Client's ID.
const WakeInfix = "wake:"

// wakeArg is the op's wake prefix argument: "" for none.
func (o *Op) wakeArg() any {
	if o.Wake == nil {
		return ""
	}
	return o.Wake
}

// IsPlaceID reports whether a token is a writer's or a set's place's ID
// (".wi", ".wif", ".wis": a key granted to a place by a release is held
// with it), which a release takes out of the key's queue (placeOutLua).
func IsPlaceID(token string) bool { return strings.Contains(token, ".wi") }

// FenceKey is the key of the lock key's fence counter, in the same Cluster
// slot.
func FenceKey(key string) string { return key + ":fence" }

// EvalArgs returns the op's arguments for node i as an EVAL of the script's
// source, for a node that answered NOSCRIPT (EVAL also caches it).
func (o *Op) EvalArgs(i int) []any {
	argv := slices.Clone(o.Args(i))
	argv[0], argv[1] = "eval", o.script().src
	return argv
}

// Args returns the op's arguments for node i: shared, but for a fenced
// acquire, whose residue is the node's own.
func (o *Op) Args(i int) []any {
	if o.Kind != OpAcquireFenced {
		return o.wire
	}
	argv := slices.Clone(o.wire)
	argv[o.residue] = i
	return argv
}
