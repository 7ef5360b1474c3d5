package wire

import (
	"context"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// FuzzReplies: any reply a node might send decodes to a status or an error,
// never a panic, and only the documented replies mean success.
func FuzzReplies(f *testing.F) {
	for _, r := range []int64{-1 << 63, -101, -1, 0, 1, 2, 3, 1 << 62} {
		f.Add(r, true, "tok\x00meta", r)
	}
	f.Fuzz(func(t *testing.T, r int64, held bool, value string, pttl int64) {
		if res := acquireReply(r, nil); res.OK() != (r == 1 || r == 2) || (res.Err != nil) != (r != 1 && r != 2) {
			t.Fatalf("acquire reply %d: got %+v", r, res)
		}
		refusal := acquireReply([]any{r, value}, nil)
		if refusal.OK() || (refusal.Err == nil) != (r <= 0) || (refusal.Err == nil && refusal.Value != value) {
			t.Fatalf("acquire refusal {%d, %q}: got %+v", r, value, refusal)
		}
		// A set's refusal names the key: {−(PTTL + 1), holder, i ≥ 1}.
		set := acquireReply([]any{r, value, pttl}, nil)
		if want := r <= 0 && pttl >= 1; (set.Err == nil) != want || want && (set.Status != StatusHeld || set.Value != value || int64(set.Details().Key) != pttl-1) {
			t.Fatalf("set refusal {%d, %q, %d}: got %+v", r, value, pttl, set)
		}
		for _, odd := range []any{nil, "x", []any{r}, []any{value, r}, []any{r, value, r, r}, []any{value, value, pttl}} {
			if res := acquireReply(odd, nil); res.Err == nil {
				t.Fatalf("acquire reply %v: got %+v, want an error", odd, res)
			}
		}
		if res := ownerReply(r); res.OK() != (r == 1) || (res.Err != nil) != (r > 1 || r < -1) {
			t.Fatalf("owner reply %d: got %+v", r, res)
		}
		// Fenced grants {1|2, fence}: only a fence in (0, 2^53) is a grant.
		fenced := acquireReply([]any{int64(1), pttl}, nil)
		if fenced.OK() != (pttl > 0 && pttl < MaxFence) || (fenced.OK() && fenced.Fence != pttl) {
			t.Fatalf("fenced grant {1, %d}: got %+v", pttl, fenced)
		}
		// The old restart guard's wrapper {'runid', id, reply} is no reply
		// any more: a node running old scripts is told apart.
		if res := acquireReply([]any{"runid", value, r}, nil); res.Err == nil {
			t.Fatalf("wrapped reply %d: got %+v, want an error", r, res)
		}
		// A release that woke or granted a waiter names it: {1, head}.
		rel := redis.NewCmd(context.Background())
		rel.SetVal([]any{r, value})
		if res := Decode(OpRelease, rel); res.OK() != (r == 1) || res.OK() && res.Head != value || !res.OK() && res.Err == nil {
			t.Fatalf("release reply {%d, %q}: got %+v", r, value, res)
		}
		if res := fenceWriteReply(r); res.OK() != (r == 1) || (res.Err == nil) != (r == 1 || r == -1) {
			t.Fatalf("fence write-back reply %d: got %+v", r, res)
		}
		var v any
		if held {
			v = value
		}
		if res := inspectReply([]any{v, pttl, value}, nil); res.Err == nil && res.Fence < 0 {
			t.Fatalf("inspect counter %q: got fence %d", value, res.Fence)
		}
		for _, reply := range [][]any{{v, pttl}, {v}, {v, value}, nil, {v, pttl, pttl}, {v, pttl, nil, r, value}, {v, pttl, value, value, r}} {
			res := inspectReply(reply, nil)
			if res.Err == nil && res.Status == StatusHeld && res.Value != Unmark(value) { // (a holder's value is reported without its Queued mark)
				t.Fatalf("inspect %v: got %+v", reply, res)
			}
		}
	})
}

// TestKeyHolder: a set's look names each key's holder, NUL after each, ""
// where none holds it; a reply without them (a one-key look's, an older
// script's) names none.
func TestKeyHolder(t *testing.T) {
	r := queueReply([]any{"s.1", int64(5000), int64(-1), "t7", "011", "\x00t7\x00t8\x00"}, nil)
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	for i, want := range []string{"", "t7", "t8", "", ""} {
		if got := r.KeyHolder(i); got != want {
			t.Errorf("KeyHolder(%d) = %q, want %q", i, got, want)
		}
	}
	if r.Details().Waits != 0b110 || r.Value != "t7" {
		t.Errorf("got %+v", r)
	}
	seven := queueReply([]any{"s.1", int64(5000), int64(-1), "t7", "011", "\x00t7\x00t8\x00", "gf-"}, nil)
	if seven.Err != nil || seven.Details().Granted != 0b001 || seven.Details().First != 0b010 || seven.KeyHolder(2) != "t8" {
		t.Errorf("a reply with the set's grants and firsts: %+v", seven)
	}
	five := queueReply([]any{"s.1", int64(5000), int64(-1), "t7", "011"}, nil)
	if five.Err != nil || five.KeyHolder(1) != "" {
		t.Errorf("a reply without holders: %+v, KeyHolder(1) = %q", five, five.KeyHolder(1))
	}
}

// TestUnmark: the Queued mark comes off a holder's value, with or without
// metadata, and nothing else does.
func TestUnmark(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"tok", "tok"},
		{"tok\x00meta", "tok\x00meta"},
		{"tok\x00\x02", "tok"},
		{"tok\x00\x02meta", "tok\x00meta"},
		{"tok\x00\x02meta\x00\x02", "tok\x00meta\x00\x02"},
		{"\x00since", "\x00since"}, // a reservation is not a holder's value
		{"\x00\x02", "\x00\x02"},   // nor one since a token that starts with the mark's byte (FuzzReplies found it)
		{"\x00\x02tok", "\x00\x02tok"},
		{"", ""},
	} {
		if got := Unmark(tc.in); got != tc.want {
			t.Errorf("Unmark(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if queued := tc.in != tc.want; IsQueued(tc.in) != queued {
			t.Errorf("IsQueued(%q) = %v, want %v", tc.in, !queued, queued)
		}
	}
}

// TestSizes holds Result and Op to the sizes the hot path was measured
// with (on 64-bit platforms): a round keeps one Result per node in its own
// allocation and every delivery copies one, so the fields few replies
// carry stay in Detail; an Op is one allocation a round, its arguments
// inside it.
func TestSizes(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the sizes are a 64-bit platform's")
	}
	if got := unsafe.Sizeof(Result{}); got > 96 {
		t.Errorf("Result is %d bytes, more than 96: move what few replies carry to Detail", got)
	}
	if got := unsafe.Sizeof(Op{}); got > 480 {
		t.Errorf("Op is %d bytes, more than the 480-byte size class", got)
	}
}

// FuzzQueueReply: any reply to a look decodes to a status or an error,
// never a panic: a well-formed one ({head, lease left, PTTL, holder, waits,
// holders, the set's grants}, the last four optional) to the key's state,
// anything else to an error; and a set's per-key fields stay within the
// reply's own bounds.
func FuzzQueueReply(f *testing.F) {
	f.Add("s.1", int64(5000), int64(-1), "t7", "011", "\x00t7\x00t8\x00", "gf-", uint8(7), false)
	f.Add("", int64(0), int64(-2), "", "", "", "", uint8(4), true)
	f.Fuzz(func(t *testing.T, head string, left, pttl int64, holder, waits, holders, mine string, n uint8, oneKey bool) {
		var fifth any = waits
		if oneKey {
			fifth = int64(len(waits) % 2)
		}
		full := []any{head, left, pttl, holder, fifth, holders, mine}
		reply := full[:min(int(n), len(full))]
		r := queueReply(reply, nil)
		if (r.Err == nil) != (len(reply) >= 3) {
			t.Fatalf("%q: got %+v", reply, r)
		}
		for i := range 70 {
			if strings.IndexByte(r.KeyHolder(i), 0) >= 0 {
				t.Fatalf("%q: KeyHolder(%d) = %q holds a NUL", reply, i, r.KeyHolder(i))
			}
		}
		if r.Err != nil {
			return
		}
		d := r.Details()
		switch {
		case pttl == -2 && (r.Status != StatusAbsent || r.Value != ""):
			t.Fatalf("%q: a free key: got %+v", reply, r)
		case pttl != -2 && (r.Status != StatusHeld || len(reply) >= 4 && r.Value != holder):
			t.Fatalf("%q: a held key: got %+v", reply, r)
		case pttl < 0 && pttl != -2 && r.PTTL != -1:
			t.Fatalf("%q: no expiry: got PTTL %v", reply, r.PTTL)
		case d.Granted&d.First != 0 || !oneKey && d.Waits>>min(len(waits), 64) != 0 || oneKey && d.Waits != 0:
			t.Fatalf("%q: a set's keys out of the reply's bounds: %+v", reply, d)
		}
		for _, odd := range [][]any{{left, left, pttl}, {head, head, pttl}, {head, left, head}, append(slices.Clone(full), head)} {
			if res := queueReply(odd, nil); res.Err == nil {
				t.Fatalf("%q: got %+v, want an error", odd, res)
			}
		}
	})
}
