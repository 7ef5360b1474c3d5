package redlock

import "sync/atomic"

// Deliberate bugs for the simulator's catalogue of mutants
// (sim_mutants_test.go): each re-introduces a bug the library must not
// have, so that a test can show the simulator catches it. They exist only
// in a build with -tags redlock_mutants; in every other build mutantsBuilt
// is a false constant, mutated is false, and the compiler drops each branch
// that asks: the shipped code path has no switch.
type codeMutant uint32

const (
	// mutDriftLeftOut: validity is TTL − elapsed, without the drift.
	mutDriftLeftOut codeMutant = 1 << iota
	// mutValidityFromReply: validity counts from the majority's reply
	// instead of the first send.
	mutValidityFromReply
	// mutCallsAttached: calls carry the caller's context again (the bug
	// fixed at stop 23): a call still queued when the caller cancels, right
	// after a majority answered, is dropped.
	mutCallsAttached
	// mutLeaderBlind: Election.Leader overlooks the announcement it read,
	// and reports a won but unannounced election (ErrNoLeader).
	mutLeaderBlind
	// mutObserveStuck: Election.Observe hands over its first leader, and
	// never a newer one.
	mutObserveStuck
	// mutSemaphoreSweeps: a semaphore's Acquire sweeps the slots between
	// strategy delays instead of waiting in line (before issue 28).
	mutSemaphoreSweeps
	// mutSilentTakeBack: a failed attempt's take-backs wake the next waiter
	// only if the attempt had won a majority by the time it failed (the bug
	// fixed in 92fe7ff): grants that came after it failed are given back
	// without a notice.
	mutSilentTakeBack
	// mutCutShortReported: a Lock whose context ends while a try is in
	// flight reports that try, which heard no node, instead of the one
	// before (the bug fixed in a0bf37d: "unreachable" for "held elsewhere").
	mutCutShortReported
	// mutLetInMinority: a reader let in by a minority of nodes holds.
	mutLetInMinority
	// mutLetInFromNotice: a let-in reader's validity counts from the
	// notices' arrival instead of its looks' sends.
	mutLetInFromNotice
	// mutLetInUnguarded: admissions count from a node whose subscription
	// just reconnected (restarted, maybe, with its readers lost).
	mutLetInUnguarded
	// mutLetInLastLook: a let-in counts from the send of the waiter's last
	// look, not the look the node names (the prototype's way).
	mutLetInLastLook
	// mutLetInKept: a reader let in where it does not hold by it keeps the
	// admission (until its place's lapse) instead of releasing it.
	mutLetInKept
	// mutGrantAfterAttempt: a writer's grants by releases still count
	// after it attempted, whose gate or take-back may have undone them.
	mutGrantAfterAttempt
	// mutSetGrantAny: a set holds where any of its keys is granted on a
	// majority, not every one.
	mutSetGrantAny
	// mutFencesMixed: a fenced waiter's grants count together whatever
	// tokens they name, and it holds with the largest.
	mutFencesMixed
	// mutGrantsStuckWait: a waiter whose grants can no longer make a
	// majority keeps them until they lapse (a lease), as before
	// 2026-11-29.
	mutGrantsStuckWait
	// mutGiveBackCounts: a waiter's grants it gave back (giveBack) still
	// count towards holding, with any that come after.
	mutGiveBackCounts
	// mutBackingIgnored: a reader's let-ins count from a node whose
	// release of the let-ins it gave back has not answered yet.
	mutBackingIgnored
	// mutGrantWithoutMetadata: a waiter with metadata counts a grant that
	// did not set it (an older Client's release).
	mutGrantWithoutMetadata
)

// activeMutants are the mutants a test switched on (a build with
// -tags redlock_mutants only).
var activeMutants atomic.Uint32

// mutated reports whether mutant m is switched on.
func mutated(m codeMutant) bool {
	return mutantsBuilt && activeMutants.Load()&uint32(m) != 0
}
