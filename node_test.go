package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEncode pins each script's wire arguments, built in one place
// (Op.Encode) from the op's fields, to the KEYS and ARGV layout the scripts
// document.
func TestEncode(t *testing.T) {
	sha := func(k wire.Kind) any { return (&wire.Op{Kind: k}).SHA() }
	quiet := wire.NewOp(wire.OpRelease, "K", "tok", "", 0)
	release := wire.NewOp(wire.OpRelease, "K", "tok", "", 0)
	release.Wake = "redlock:wake:"
	cooldown := wire.NewOp(wire.OpRelease, "K", "tok", "", time.Minute)
	cooldown.Wake = "redlock:wake:"
	p := &wire.Place{ID: "W", Ticket: 1795000000000001, Lease: time.Second}
	queued := wire.NewOp(wire.OpAcquire, "K", "tok", "tok", time.Second)
	queued.Place = p
	join := &wire.Op{Kind: wire.OpQueue, Key: "K", Place: p, Wake: "redlock:wake:"}
	leave := &wire.Op{Kind: wire.OpQueue, Key: "K", Place: p, Quiet: true, Wake: "redlock:wake:"}
	for _, tc := range []struct {
		name string
		o    *wire.Op
		node int
		want []any
	}{
		{"acquire", wire.NewOp(wire.OpAcquire, "K", "tok", "tok", time.Second), 0, []any{"evalsha", sha(wire.OpAcquire), 1, "K", "tok", "tok", int64(1000)}},
		{"acquire, queued", queued, 0, []any{"evalsha", sha(wire.OpAcquire), 1, "K", "tok", "tok", int64(1000), "W", int64(1795000000000001), int64(1000)}},
		{"queue: join or refresh", join, 0, []any{"evalsha", sha(wire.OpQueue), 1, "K", "W", int64(1795000000000001), int64(1000), "redlock:wake:"}},
		{"queue: leave", leave, 0, []any{"evalsha", sha(wire.OpQueue), 1, "K", "W", 0, int64(1000), "redlock:wake:"}},
		{"acquire with metadata", wire.NewOp(wire.OpAcquire, "K", "tok", "tok\x00meta", 1500*time.Millisecond), 0, []any{"evalsha", sha(wire.OpAcquire), 1, "K", "tok", "tok\x00meta", int64(1500)}},
		{"extend", wire.NewOp(wire.OpExtend, "K", "tok", "", 2*time.Second), 0, []any{"evalsha", sha(wire.OpExtend), 1, "K", "tok", int64(2000)}},
		{"release", release, 0, []any{"evalsha", sha(wire.OpRelease), 1, "K", "tok", int64(0), "redlock:wake:"}},
		{"release, quiet", quiet, 0, []any{"evalsha", sha(wire.OpRelease), 1, "K", "tok", int64(0), ""}},
		{"release with cooldown", cooldown, 0, []any{"evalsha", sha(wire.OpRelease), 1, "K", "tok", int64(60000), "redlock:wake:"}},
		{"inspect", wire.NewOp(wire.OpInspect, "K", "", "", 0), 0, []any{"evalsha", sha(wire.OpInspect), 2, "K", "K:fence"}},
		{"acquire fenced, node 3", wire.NewOp(wire.OpAcquireFenced, "K", "tok", "tok", time.Second), 3, []any{"evalsha", sha(wire.OpAcquireFenced), 2, "K", "K:fence", "tok", "tok", int64(1000), 3, wire.FenceModulus, int64(0)}},
		{"fence write-back", wire.NewFenceWrite("K", nil, "tok", 42), 0, []any{"evalsha", sha(wire.OpFenceWrite), 1, "K", int64(42), "tok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Encode()
			assert.Equal(t, tc.want, tc.o.Args(tc.node))
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
