package wire

import (
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kind names an operation; it indexes scripts.
type Kind int

const (
	OpAcquire Kind = iota
	OpExtend
	OpRelease
	OpInspect
	OpAcquireFenced
	OpFenceWrite
	OpQueue
	OpProclaim
	// OpAcquirePlain is a mutex's uncontended acquire as one plain
	// command, SET key value NX PX ttl, where no script is needed: a fresh
	// token (no re-entry), no place in the queue, no fencing. A free key
	// with a live queue is Reserved (see queueLua), so the NX keeps it from
	// jumping the queue. Its refusal says neither who holds the key nor for
	// how long (see plainReply). A node not yet known to run the library's
	// scripts is sent Scripted instead (internal/nodeio).
	OpAcquirePlain
	// OpAcquireFencedPlain is a mutex's uncontended fenced acquire as two
	// plain commands in one pipeline: SET key value NX PX ttl, then ZADD
	// counter GT CH proposal c (see counterLua). Where the SET is granted
	// and the ZADD raised the counter to the proposal, the node took it, as
	// fenceLua does: its reply's fence is the proposal. A grant whose ZADD
	// did not (the counter at or above the proposal, or a string counter
	// from before 2026-11-29) is followed on the node by the fenced
	// acquire's script, as re-entry, which hands out the node's next value
	// (see PlainFenced). A refused SET's ZADD raises the counter with no
	// grant: a fence write-back allows for it (fenceWriteSrc). The ZADD
	// goes second, so no other grant can run on the node between the two.
	// Like OpAcquirePlain it is sent Scripted to a node not yet known to
	// run the library's scripts.
	OpAcquireFencedPlain
)

// Reserved starts a free key's value while its wait queue lives (see
// queueLua): a NUL, then the token of the release the key has been free
// since, where a release reserved it. Tokens never start with NUL, so no
// token's value is one.
const Reserved = "\x00"

// IsReserved reports whether a key's value v is a reservation (Reserved).
func IsReserved(v string) bool { return strings.HasPrefix(v, Reserved) }

// Queued marks a holder's value whose key has had places in its wait
// queue while it was held: the byte 2 right after the token's NUL
// ("token\x00\x02" without metadata, "token\x00\x02metadata" with
// it). A script that puts a place in a held key's queue marks the
// holder's value (markLua), a grant that leaves places behind sets it
// marked, and re-entry and a proclamation keep the mark, so that the
// release reads the queue only where the value says there is one: the
// uncontended release runs GET and DEL, not a third command for the
// queue (docs/design.md, "The uncontended acquire"). Owner checks read
// the token up to the NUL, so the mark changes none of them, nor what an
// older Client's scripts see. Metadata never starts with the byte
// (WithMetadata refuses it), so the mark is never misread.
const Queued = "\x00\x02"

// Unmark returns a holder's value v without its Queued mark, as it was
// set. A value that starts with NUL is a reservation (Reserved), no
// holder's, and is returned as it is, as IsQueued reads it: the token it
// names may start with the mark's byte (WithToken refuses only NUL).
func Unmark(v string) string {
	i := strings.IndexByte(v, 0)
	if i <= 0 || !strings.HasPrefix(v[i:], Queued) {
		return v
	}
	if len(v) == i+len(Queued) {
		return v[:i]
	}
	return v[:i+1] + v[i+len(Queued):]
}

// IsQueued reports whether a holder's value v carries the Queued mark.
func IsQueued(v string) bool {
	i := strings.IndexByte(v, 0)
	return i > 0 && strings.HasPrefix(v[i:], Queued)
}

// script is a Lua script with its SHA1, boxed once so that building a call's
// arguments does not allocate for them.
type script struct {
	src, sha any
}

const kindCount = int(OpAcquireFencedPlain) + 1

// scriptSet is a primitive's scripts, by op kind: where it has none of its
// own for a kind, an op of that kind runs the mutex's.
type scriptSet [kindCount]string

// byMode is every primitive's scripts. A new primitive adds its Mode, a
// file of its scripts that declares its scriptSet, and a row here.
var byMode = [modeCount]scriptSet{
	ModeMutex:    mutexScripts,
	ModeElection: electionScripts,
	ModeSet:      setScripts,
	ModeWrite:    writeScripts,
	ModeRead:     readScripts,
}

// scripts is byMode with each script's SHA1, made once, the mutex's filled
// in where a primitive has none of its own.
var scripts = func() (t [modeCount][kindCount]script) {
	for m := range byMode {
		for k := range kindCount {
			src := byMode[m][k]
			if src == "" {
				src = byMode[ModeMutex][k]
			}
			t[m][k] = script{src: src, sha: redis.NewScript(src).Hash()}
		}
	}
	return t
}()

// releasesOneKey says which primitives release with releaseSrc (the
// mutex's, which a writer and an election share), whose fast path a
// place's release must stay off (Op.release).
var releasesOneKey = func() (t [modeCount]bool) {
	for m := range byMode {
		t[m] = scripts[m][OpRelease].src == any(releaseSrc)
	}
	return t
}()

// script is the op's script: its primitive's (Mode) for its kind.
func (o *Op) script() script { return scripts[o.Mode][o.Kind] }

// Source is the Lua source of the op's script.
func (o *Op) Source() string { return o.script().src.(string) }

// SHA is the SHA1 of the op's script, as EVALSHA names it.
func (o *Op) SHA() string { return o.script().sha.(string) }

// ScriptCount bounds ScriptIndex: one number per primitive and op kind.
const ScriptCount = int(modeCount) * kindCount

// ScriptIndex numbers the op's script below ScriptCount, for a node's
// stream to record which scripts the node is known to hold (see
// internal/nodeio); −1 for an op that runs none (IsPlain).
func (o *Op) ScriptIndex() int {
	if IsPlain(o.Kind) {
		return -1
	}
	return int(o.Mode)*kindCount + int(o.Kind)
}

// IsPlain reports whether ops of kind k are plain commands, not a script.
func IsPlain(k Kind) bool { return k == OpAcquirePlain || k == OpAcquireFencedPlain }
