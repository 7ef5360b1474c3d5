package redlock

import (
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is a let-in or granted waiter's admissions (letin.go): which
// nodes let it in, from when each counts, and, for a fenced waiter, the
// fencing token each grant handed out; when they hold the lock; and what
// its looks saw of its grants, while their notices are on their way.

// admission is a let-in waiter's record of its looks and admissions
// (a granted writer's: grants), guarded by the handoff's mu. sends is nil
// for a waiter that is never let in or granted the key (a reader with a
// token of its own, a writer but as grantable says).
type admission struct {
	seq   int64               // the number of its last look
	sends map[int64]time.Time // its recent looks' sends, by number
	// keys: the admissions of each key in whose queue it has a place:
	// one, or a semaphore's slots (in eachQueueKey's order), each of
	// which a release may grant it
	keys []admits
	took bool // it holds by its place's ID
	// attempted: a writer that has attempted (or been handed an
	// attempt): its attempt may have taken, or a failed one's gate
	// reserved, a key a release granted its place, so its admissions no
	// longer count; they wake it to attempt.
	attempted bool
	// backing: a reader's nodes whose release of the let-ins it gave back
	// (giveBackLetIns) has not answered yet; let-ins from them do not
	// count until it has
	backing uint64
}

// admits is a waiter's admissions to one key.
type admits struct {
	from     []time.Time // per node counted: the send its admission counts from
	admitted uint64      // nodes that let it in (bit i: node i)
	counted  uint64      // of those, the ones that count towards holding
	// fences, a fenced waiter's (nil otherwise): per node counted, the
	// fencing token its grant handed out (see fencedGrant)
	fences []int64
}

// agreeing returns the counted admissions that hold together, and their
// fencing token: all of them, but for a fenced waiter's, those that name
// the token most of them name. A majority that shows one token holds the
// lock with it (docs/fencing.md, claim 3); grants with different tokens
// (of two releases) never add up.
func (a *admits) agreeing() (uint64, int64) {
	if a.fences == nil {
		return a.counted, 0
	}
	if mutated(mutFencesMixed) {
		return a.counted, slices.Max(a.fences)
	}
	var best uint64
	var fence int64
	for i, f := range a.fences {
		if a.counted&(1<<i) == 0 {
			continue
		}
		var m uint64
		for j, g := range a.fences {
			if a.counted&(1<<j) != 0 && g == f {
				m |= 1 << j
			}
		}
		if bits.OnesCount64(m) > bits.OnesCount64(best) {
			best, fence = m, f
		}
	}
	return best, fence
}

// agreeingCount is how many admissions agreeing returns.
func (a *admits) agreeingCount() int {
	m, _ := a.agreeing()
	return bits.OnesCount64(m)
}

// parseAdmission reads a let-in notice's look number n, after an 'f' the
// fencing token a fenced waiter's grant handed out (0: none), and a final
// 'v' that says the grant set the waiter's value (its metadata) beside
// its ID.
func parseAdmission(n string) (seq, fence int64, valued bool, err error) {
	n, valued = strings.CutSuffix(n, "v")
	s, f, fenced := strings.Cut(n, "f")
	if seq, err = strconv.ParseInt(s, 10, 64); err != nil || !fenced {
		return seq, 0, valued, err
	}
	fence, err = strconv.ParseInt(f, 10, 64)
	return seq, fence, valued, err
}

// keepsMetadata reports whether id is the place of a waiter with metadata
// that a release may grant the key (".wim", ".wifm", ".wism": see
// grantable), which counts a grant only where it set the metadata beside
// the ID (the notice says so with a 'v'; an older Client's release grants
// the key without it).
func keepsMetadata(id string) bool {
	return strings.Contains(id, ".wim") || strings.Contains(id, ".wifm") || strings.Contains(id, ".wism")
}

// admitsOf returns w's admissions to rkey, nil if it has no place there.
func (w *waiter) admitsOf(rkey string) *admits {
	k := 0
	switch {
	case w.t.slots != nil:
		k = slices.IndexFunc(w.t.slots, func(st target) bool { return st.rkey == rkey })
	case w.t.multiKey():
		k = slices.Index(w.t.rkeys, rkey)
	}
	if k < 0 {
		return nil
	}
	return &w.keys[k]
}

// holdsAny reports whether w's counted admissions hold on quorum nodes:
// to its key, to any slot of a semaphore's, or to every key of a set's
// on the same nodes; callers hold the handoff's mu.
func (w *waiter) holdsAny(quorum int) bool {
	if w.t.multiKey() {
		return bits.OnesCount64(w.setAdmits().counted) >= quorum
	}
	return slices.ContainsFunc(w.keys, func(a admits) bool { return a.agreeingCount() >= quorum })
}

// letInQuorum is how many admissions hold the lock: a majority.
func (h *handoff) letInQuorum() int {
	if mutated(mutLetInMinority) {
		return h.c.quorum() - 1
	}
	return h.c.quorum()
}

// letInFrom returns the time a key's admissions hold it from: the
// earliest of the best majority's, if a majority count.
func (a *admits) letInFrom(quorum int) (time.Time, bool) {
	var from []time.Time
	agree, _ := a.agreeing()
	for i, t := range a.from {
		if agree&(1<<i) != 0 {
			from = append(from, t)
		}
	}
	if len(from) < quorum {
		return time.Time{}, false
	}
	slices.SortFunc(from, func(a, b time.Time) int { return b.Compare(a) })
	return from[quorum-1], true
}

// bestAdmits returns the key (its index in w.keys) whose admissions hold
// it longest, and from when, if any key's count on a majority: one key,
// or, for a semaphore's waiter, one of the slots releases granted it;
// for a set's, the keys together (the index is 0), where every one is.
func (w *waiter) bestAdmits(quorum int) (k int, a admits, from time.Time, ok bool) {
	if w.t.multiKey() {
		a = w.setAdmits()
		from, ok = a.letInFrom(quorum)
		return 0, a, from, ok
	}
	for i := range w.keys {
		if f, held := w.keys[i].letInFrom(quorum); held && (!ok || f.After(from)) {
			k, a, from, ok = i, w.keys[i], f, true
		}
	}
	return k, a, from, ok
}

// noteGrants notes, for awaitGrants and checkGrants, whether w's look rs,
// sent at sent, found its key (a slot; a set's key) granted to its place
// (or it let in) on some node, and on a majority (a set's: every key on
// each).
func (w *waiter) noteGrants(sent time.Time, rs ...*round) {
	w.grantSeen, w.grantsHeld = 0, false
	w.grantsFrom = append(w.grantsFrom[:0], make([]uint64, len(w.keys))...)
	all := uint64(1)<<len(w.t.rkeys) - 1 // a set's keys
	for j, r := range rs {
		seen, n := false, 0
		for i, res := range r.results {
			if !res.Answered {
				continue
			}
			seen = seen || res.Head == wire.LetIn || res.Details().Granted != 0
			w.noteGrantFrom(i, j, res)
			if res.Head == wire.LetIn || w.t.multiKey() && res.Details().Granted == all {
				n++
			}
		}
		if seen {
			w.grantSeen = max(time.Since(sent), time.Microsecond)
		}
		w.grantsHeld = w.grantsHeld || 2*n > len(r.results)
	}
}

// noteGrantFrom notes in w.grantsFrom that node i answered j, the round
// of one key (a slot's) of w's look, or a set's of all its keys, with res.
func (w *waiter) noteGrantFrom(i, j int, res wire.Result) {
	switch {
	case w.t.multiKey():
		granted := res.Details().Granted
		for k := range w.grantsFrom {
			if granted&(1<<k) != 0 {
				w.grantsFrom[k] |= 1 << i
			}
		}
	case res.Head == wire.LetIn && j < len(w.grantsFrom):
		w.grantsFrom[j] |= 1 << i
	}
}

// noticesDue reports whether a node w's last look found granting it a
// key has not yet told it so (its notice not read); callers hold the
// handoff's mu.
func (w *waiter) noticesDue() bool {
	for k, nodes := range w.grantsFrom {
		if k < len(w.keys) && nodes&^w.keys[k].admitted != 0 {
			return true
		}
	}
	return false
}

// maxGrantChecks bounds the looks in a row that only check a waiter's
// grants (see checkGrants).
const maxGrantChecks = 4

// checkGrants handles the look, sent at sent, of a waiter w whose look
// lookShort called (check) and which gave back nothing (gaveBack), as
// noteGrants noted it:
// it reports whether w's grants are still to be checked (more), and then
// when to look again, and whether the look found them on a majority of
// nodes (held: the key, a slot, or a set's every key), whose notices are
// on their way. A look that found them so waits for those notices rather
// than be judged (and attempt); one that found them on a minority is
// judged, and unless it attempts, looks again by then: the nodes that
// granted others may not have the same waiters yet (their joins on the
// way), and a look too early sees no stuck grants (a reader let in on 2
// nodes of 5 waited for its strategy's delay, up to 108 ms, in
// TestRWMutexGrantsSplitBetweenWaiters). Each such look follows twice as
// far off, up to maxGrantChecks; then w is judged as any other look is
// (its notices lost: a subscription down). Before, a look that found
// the grants on a majority attempted, and its attempt took them with a
// token of its own, a round later, where notices slowed by a busy CPU
// came a few ms after it (TestSemaphorePermitsGrantedByRelease beside a
// CPU hog).
func (w *waiter) checkGrants(check, gaveBack bool, sent time.Time) (hint time.Duration, held, more bool) {
	if !check || gaveBack || w.grantSeen == 0 || w.grantChecks >= maxGrantChecks {
		w.grantChecks = 0
		return 0, false, false
	}
	w.grantChecks++
	w.checkOnly = true // the next look checks too, unless a wake to attempt comes first
	return max(setLookDelay, 2*time.Since(sent)) << w.grantChecks, w.grantsHeld, true
}
