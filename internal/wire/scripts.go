package wire

import "github.com/redis/go-redis/v9"

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
)

// script is a Lua script with its SHA1, boxed once so that building a call's
// arguments does not allocate for them.
type script struct {
	src, sha any
}

// The scripts beyond one per op kind: a multi-key lock's acquires,
// extend and release (an op with keys), and a read-write lock's writer acquires and
// reader ops (by the op's mode).
const (
	scriptAcquireMulti = OpProclaim + 1 + iota
	scriptAcquireMultiFenced
	scriptAcquireWrite
	scriptAcquireWriteFenced
	scriptReadAcquire
	scriptReadExtend
	scriptReadRelease
	scriptExtendMulti
	scriptReleaseMulti
	scriptCount
)

var scripts = func() [scriptCount]script {
	var s [scriptCount]script
	for k, src := range [...]string{OpAcquire: acquireSrc, OpExtend: extendSrc, OpRelease: releaseSrc, OpInspect: inspectSrc,
		OpAcquireFenced: acquireFencedSrc, OpFenceWrite: fenceWriteSrc, OpQueue: queueSrc, OpProclaim: proclaimSrc,
		scriptAcquireMulti: acquireMultiSrc, scriptAcquireMultiFenced: acquireMultiFencedSrc,
		scriptAcquireWrite: acquireWriteSrc, scriptAcquireWriteFenced: acquireWriteFencedSrc,
		scriptReadAcquire: readAcquireSrc, scriptReadExtend: readExtendSrc, scriptReadRelease: readReleaseSrc,
		scriptExtendMulti: extendMultiSrc, scriptReleaseMulti: releaseMultiSrc} {
		s[k] = script{src: src, sha: redis.NewScript(src).Hash()}
	}
	return s
}()

// script is the op's script: its kind's, or the variant its keys or
// mode ask for.
func (o *Op) script() script {
	k := o.Kind
	switch {
	case o.Keys != nil && k == OpAcquire:
		return scripts[scriptAcquireMulti]
	case o.Keys != nil && k == OpAcquireFenced:
		return scripts[scriptAcquireMultiFenced]
	case o.Keys != nil && k == OpExtend:
		return scripts[scriptExtendMulti]
	case o.Keys != nil && k == OpRelease:
		return scripts[scriptReleaseMulti]
	case o.Mode == ModeWrite && k == OpAcquire:
		return scripts[scriptAcquireWrite]
	case o.Mode == ModeWrite && k == OpAcquireFenced:
		return scripts[scriptAcquireWriteFenced]
	case o.Mode == ModeRead && k == OpAcquire:
		return scripts[scriptReadAcquire]
	case o.Mode == ModeRead && k == OpExtend:
		return scripts[scriptReadExtend]
	case o.Mode == ModeRead && k == OpRelease:
		return scripts[scriptReadRelease]
	}
	return scripts[o.Kind]
}

// Source is the Lua source of the op's script.
func (o *Op) Source() string { return o.script().src.(string) }

// SHA is the SHA1 of the op's script, as EVALSHA names it.
func (o *Op) SHA() string { return o.script().sha.(string) }
