package wire

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redlock-go/redlock/internal/memnode"
)

// TestReleaseForms: a one-key release is sent as the token alone only when
// releaseSrc can derive all it would have been told: no cooldown, a wake
// prefix that is the key's prefix's, a token that is no place's, no fence
// and no take-back; every other release keeps its arguments.
func TestReleaseForms(t *testing.T) {
	const key, token = "app:{job}", "tok"
	rel := func(f func(o *Op)) *Op {
		o := NewOp(OpRelease, key, token, "", 0)
		o.Wake = "app:wake:"
		f(o)
		o.Encode()
		return o
	}
	for _, tc := range []struct {
		name  string
		op    *Op
		short bool
	}{
		{"the everyday release", rel(func(*Op) {}), true},
		{"a writer's", rel(func(o *Op) { o.Mode = ModeWrite }), true},
		{"an empty prefix", rel(func(o *Op) { o.Key, o.Wake = "{job}", "wake:" }), true},
		{"a cooldown", rel(func(o *Op) { o.TTL = time.Second }), false},
		{"another prefix's channels", rel(func(o *Op) { o.Wake = "other:wake:" }), false},
		{"a prefix that is longer", rel(func(o *Op) { o.Wake = "app:x:wake:" }), false},
		{"a key without braces", rel(func(o *Op) { o.Key = "app:job" }), false},
		{"wakes nobody", rel(func(o *Op) { o.Wake = nil }), false},
		{"a place's token", rel(func(o *Op) { o.Token = "c1.wi3" }), false},
		{"a fenced waiter's proposal", rel(func(o *Op) { o.Fence = 63 }), false},
		{"a take-back", rel(func(o *Op) { o.WakeOnly = true }), false},
		{"a reader's", rel(func(o *Op) { o.Mode = ModeRead }), false},
	} {
		args := tc.op.Args(0)
		if got := slices.Equal(args[2:], []any{1, tc.op.Key, tc.op.Token}); got != tc.short {
			t.Errorf("%s: sent %v, short form %v, want %v", tc.name, args[2:], got, tc.short)
		}
	}
}

// TestShortReleaseWakes: the short form, on a key with a waiter, wakes it
// on the channel its Client listens on (prefix + "wake:" + its ID), as the
// full form does; the node runs the production Lua.
func TestShortReleaseWakes(t *testing.T) {
	for _, key := range []string{"app:{job}", "{job}", "a:{b}{c}"} {
		n := memnode.New()
		prefix, _, _ := strings.Cut(key, "{")
		var got []string
		n.Subscribe("*", func(ch, _ string) { got = append(got, ch) })
		acq := NewOp(OpAcquire, key, "tok", "tok", 10*time.Second)
		queue := &Op{Kind: OpQueue, Key: key, Wake: prefix + WakeInfix, Place: &Place{ID: "c7.1", Ticket: 100, Lease: 5 * time.Second}}
		rel := NewOp(OpRelease, key, "tok", "", 0)
		rel.Wake = prefix + WakeInfix
		for _, o := range []*Op{acq, queue, rel} {
			o.Encode()
			n.Do(o.EvalArgs(0)...)
		}
		if len(rel.Args(0)) != 5 {
			t.Fatalf("%s: the release was not sent in its short form: %v", key, rel.Args(0))
		}
		if want := prefix + WakeInfix + "c7"; !slices.Contains(got, want) {
			t.Errorf("%s: published on %v, want %s", key, got, want)
		}
	}
}
