package redlock

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEncode pins each script's wire arguments, built in one place
// (op.encode) from the op's fields, to the KEYS and ARGV layout the scripts
// document.
func TestEncode(t *testing.T) {
	sha := func(k opKind) any { return scripts[k].sha }
	quiet := newOp(opRelease, "K", "tok", "", 0)
	quiet.quiet = true
	guarded := newOp(opAcquire, "K", "tok", "tok\x00meta", 1500*time.Millisecond)
	guarded.knownIDs = ",id1,"
	for _, tc := range []struct {
		name string
		o    *op
		node int
		want []any
	}{
		{"acquire", newOp(opAcquire, "K", "tok", "tok", time.Second), 0, []any{"evalsha", sha(opAcquire), 1, "K", "tok", "tok", int64(1000), ""}},
		{"acquire, guarded", guarded, 0, []any{"evalsha", sha(opAcquire), 1, "K", "tok", "tok\x00meta", int64(1500), ",id1,"}},
		{"extend", newOp(opExtend, "K", "tok", "", 2*time.Second), 0, []any{"evalsha", sha(opExtend), 1, "K", "tok", int64(2000)}},
		{"release", newOp(opRelease, "K", "tok", "", 0), 0, []any{"evalsha", sha(opRelease), 1, "K", "tok", int64(0), 1}},
		{"release, quiet", quiet, 0, []any{"evalsha", sha(opRelease), 1, "K", "tok", int64(0), 0}},
		{"release with cooldown", newOp(opRelease, "K", "tok", "", time.Minute), 0, []any{"evalsha", sha(opRelease), 1, "K", "tok", int64(60000), 1}},
		{"inspect", newOp(opInspect, "K", "", "", 0), 0, []any{"evalsha", sha(opInspect), 2, "K", "K:fence"}},
		{"acquire fenced, node 3", newOp(opAcquireFenced, "K", "tok", "tok", time.Second), 3, []any{"evalsha", sha(opAcquireFenced), 2, "K", "K:fence", "tok", "tok", int64(1000), 3, fenceModulus, ""}},
		{"fence write-back", newFenceWrite("K", 42), 0, []any{"evalsha", sha(opFenceWrite), 1, "K:fence", int64(42)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.encode()
			assert.Equal(t, tc.want, tc.o.nodeArgs(tc.node))
		})
	}
}

// TestPermanent: the node errors that waiting cannot cure, and what to
// change for each; transient ones are not among them.
func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		err  string
		hint string // "" for transient
	}{
		{"NOGUARD redlock: the restart guard needs INFO server inside scripts, and this node refused it: section (server) is not supported", "WithRestartGuard(0)"},
		{"NOPERM this user has no permissions to run the 'evalsha' command", "ACL"},
		{"READONLY You can't write against a read only replica.", "replica"},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", "WithKeyPrefix"},
		{"FENCE redlock: fence counter redlock:{k}:fence is not a whole number", "fence counter"},
		{"WRONGPASS invalid username-password pair or user is disabled.", "credentials"},
		{"ERR unknown command 'evalsha', with args beginning with: ", "Lua scripts"},
		{"ERR Error compiling script (new function): user_script:1: unexpected symbol", "Lua scripts"},
		{"LOADING Redis is loading the dataset in memory", ""},
		{"BUSY Redis is busy running a script.", ""},
		{"OOM command not allowed when used memory > 'maxmemory'.", ""},
		{"MASTERDOWN Link with MASTER is down", ""},
		{"dial tcp 127.0.0.1:1: connect: connection refused", ""},
		{"no reply within 500ms: context deadline exceeded", ""},
	} {
		hint, ok := permanent(errors.New(tc.err))
		if tc.hint == "" {
			assert.False(t, ok, "%q is transient, got hint %q", tc.err, hint)
			continue
		}
		if assert.True(t, ok, "%q is permanent", tc.err) {
			assert.Contains(t, hint, tc.hint, "%q", tc.err)
		}
	}
	_, ok := permanent(nil)
	require.False(t, ok)
}

// TestRunIDCheckFailsFirst: the restart guard's INFO runs before any write
// in both acquire scripts, and a refusal answers NOGUARD instead of raising
// (so the node writes nothing and the error names the option).
func TestRunIDCheckFailsFirst(t *testing.T) {
	for name, src := range map[string]string{"acquire": acquireSrc, "acquire fenced": acquireFencedSrc} {
		info := strings.Index(src, "redis.pcall('INFO', 'server')")
		write := strings.Index(src, "redis.call('SET'")
		require.Positive(t, info, name)
		require.Less(t, info, write, "%s: INFO must run before the first write", name)
		require.Contains(t, src, "redis.error_reply('NOGUARD", name)
	}
}
