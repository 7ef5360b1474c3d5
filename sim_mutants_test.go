package redlock

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// mutant is a deliberate bug the simulator must catch, applied by the test
// itself: a variant of a script that the in-memory nodes run instead of
// the library's, never a change to the library.
type mutant struct {
	name string
	node func(*fakeNode) // applied to every node
	code codeMutant      // switched on in the library (a build with -tags redlock_mutants)
	// clock, if not 0, is every node's clock rate for the whole run: a
	// canary breaks an assumption (the drift bound) instead of the code.
	clock float64
	// budget, if not 0, is the seeds this mutant is given instead of
	// -sim.budget: its schedule is rare in the workload.
	budget int
	// rw, if set, gives two thirds of every worker's locks to the
	// read-write lock: a mutant of its rules has the runs of its own
	// primitive, as a directed test would, with the same random faults.
	rw bool
}

var noMutant = mutant{name: "none"}

func (m mutant) applyNode(f *fakeNode) {
	if m.node != nil {
		m.node(f)
	}
}

// scriptMutant runs, in place of the script src, src with each of the
// replacements (old, new, old, new, …) made; it panics if one finds
// nothing to replace, so that a changed script cannot leave a mutant that
// mutates nothing.
func scriptMutant(name, src string, replacements ...string) mutant {
	mutated := mustReplace(fmt.Sprintf("mutant %q", name), src, replacements...)
	return mutant{name: name, node: func(f *fakeNode) {
		f.variant = func(o *wire.Op) string {
			if o.Source() == src {
				return mutated
			}
			return ""
		}
	}}
}

// everyScript is scriptMutant for every script that holds old (a part
// the scripts share), its first occurrence replaced by new.
func everyScript(name, old, new string) mutant { return replaceInScripts(name, old, new, 1) }

// everywhere is everyScript with every occurrence of old replaced.
func everywhere(name, old, new string) mutant { return replaceInScripts(name, old, new, -1) }

func replaceInScripts(name, old, new string, n int) mutant {
	if !slices.ContainsFunc(allScripts(), func(src string) bool { return strings.Contains(src, old) }) {
		panic(fmt.Sprintf("mutant %q: no script holds %q", name, old)) // it would mutate nothing
	}
	var mu sync.Mutex
	mutated := map[string]string{}
	return mutant{name: name, node: func(f *fakeNode) {
		f.variant = func(o *wire.Op) string {
			src := o.Source()
			mu.Lock()
			defer mu.Unlock()
			m, ok := mutated[src]
			if !ok {
				if strings.Contains(src, old) {
					m = strings.Replace(src, old, new, n)
				}
				mutated[src] = m
			}
			return m
		}
	}}
}

// allScripts is the source of every script of every primitive.
func allScripts() []string {
	var srcs []string
	for m := wire.ModeMutex; m <= wire.ModeRead; m++ {
		for k := wire.OpAcquire; k <= wire.OpAcquireFencedPlain; k++ {
			if o := (&wire.Op{Kind: k, Mode: m}); o.ScriptIndex() >= 0 {
				srcs = append(srcs, o.Source())
			}
		}
	}
	return srcs
}

func init() {
	// A mutant that mutates nothing would be caught by nothing, and pass
	// for a gap in the simulator.
	if !strings.Contains((&wire.Op{Kind: wire.OpAcquire}).Source(), queueGate) {
		panic("mutants: the queue gate is not in gateLua")
	}
}

// queueGateSkipped lets a free key go to whoever asks, whoever waits
// first (the catalogue's, and TestQueueGateMutantCaught's).
var queueGateSkipped = everyScript("the queue gate skipped: a free key goes to whoever asks", queueGate, "if h and h ~= id then return nil end")

// queueGate is gateLua's refusal of a free key to anyone but the first
// waiter.
const queueGate = "if h and h ~= id then\n\t\treserve(ticket ~= '0' and math.max(left, tonumber(lease)) or left, nil, since)\n\t\treturn {-1 - left, '', h}\n\tend"

// readerAttemptTakesLetIn is the read-write lock's bug TestChaosRWMutex
// found in CI on 2026-12-03: a reader's attempt, where a release had let
// it in, took the let-in over (its place's ID left the readers for its
// token), so that the failed attempt's take-back removed let-ins whose
// notices were still on their way, and the reader held by them. The
// simulator caught it once it had stalls that hold notices alone and the
// check that a valid Lock is backed by a majority (sim_backing_test.go);
// readerAttemptBroken builds the schedule (TestReaderAttemptMutantCaught).
var readerAttemptTakesLetIn = scriptMutant("a reader's attempt takes its let-in over", (&wire.Op{Kind: wire.OpAcquire, Mode: wire.ModeRead}).Source(),
	"local r, ttl = KEYS[1] .. ':readers', tonumber(ARGV[3])\n\tredis.call('ZADD', r, ",
	"local r, ttl = KEYS[1] .. ':readers', tonumber(ARGV[3])\n\tredis.call('ZREM', r, id)\n\tredis.call('ZADD', r, ")

const tokenCheck = "if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\\0' then return -1 end\n"

// mutants is the catalogue: each must be caught by the simulator within
// its seed budget (docs/testing.md has how soon). The mutants of the
// library's own code need a build with -tags redlock_mutants (make test
// runs one); without it they are skipped. Bugs the simulator does not
// catch within its budget are not in it (docs/testing.md says why;
// directed tests cover them): a lenient fence write-back (its schedule
// needs four delays in a precise order) and Lead dropping an end that
// comes before the announcement (a goroutine interleaving within one
// proclaim round).
var mutants = []mutant{
	{name: "drift left out of the validity", code: mutDriftLeftOut},
	// Validity counted from the majority's reply, not the send: caught at
	// seeds 17 to 78 on a quiet machine and not in 300 beside a CPU hog
	// (CI, 2026-11-29), since most hand-offs are grants by release; at 27,
	// 90, 38 and 94 from four starts, and at 9 and 67 from two beside two
	// CPU hogs, on 2026-12-03. A budget of its own; TestCodeMutantsCaught
	// runs its schedule too.
	withBudget(1000, mutant{name: "validity counted from the majority's reply, not the send", code: mutValidityFromReply}),
	{name: "calls dropped when the caller cancels after a majority (stop 23's bug)", code: mutCallsAttached},
	{name: "Leader overlooks the announcement it read", code: mutLeaderBlind},
	// These two, and the reader ahead of a writer below, were caught past
	// seed 100 in some runs (106, 84; 149) on a quiet machine (2026-11-29),
	// and a run beside a CPU hog goes further: budgets of their own.
	withBudget(1000, mutant{name: "Observe hands over its first leader and no newer one", code: mutObserveStuck}),
	withBudget(1000, mutant{name: "a semaphore's Acquire sweeps between delays instead of waiting in line", code: mutSemaphoreSweeps}),
	// Its schedule is a queued waiter's context ending while its attempt
	// is in flight, with the next waiter's look due after the bound:
	// never caught in 3,000 seeds before the simulator's callers gave up
	// at that moment (simQuits); lateWinnerBroken builds it, and
	// TestCodeMutantsCaught runs it under the mutant. Caught at seeds 10
	// to 49 in six runs, and once at 206 (2026-11-29): a budget of its
	// own.
	withBudget(1000, mutant{name: "a failed attempt's late grants given back without a notice (92fe7ff's bug)", code: mutSilentTakeBack}),
	{name: "a Lock cut short by its context reports the try that heard no node (a0bf37d's bug)", code: mutCutShortReported},
	// A canary: the library is right, the drift bound is not (every node's
	// clock 10 drift factors fast, keys expire 9% early).
	{name: "canary: node clocks beyond the drift factor", clock: 1 + 10*defaultDriftFactor},
	// Caught at seeds 42, 78, 91 and 112 on e9b371d, and at 4, 45, 137
	// and not in 300 three trees on (2026-12-03): most hand-offs are
	// grants by release, and an attempt by a waiter that is not first
	// comes only as goroutines happen to run. A budget of its own;
	// TestQueueGateMutantCaught builds the schedule.
	withBudget(1000, queueGateSkipped),
	// Liveness, not safety: waiters of other Clients wait for their
	// timers. Every notice goes, the grants' too: with only the wakes
	// dropped, a release still granted its first waiter and told it so,
	// and a run caught the mutant or not as goroutines happened to run
	// (CI, 2026-11-29: not in 300 seeds; alone: at seed 16).
	everywhere("release notices never published", "redis.call('PUBLISH', prefix .. ", "local _ = tostring(prefix .. "),
	// The everyday release is the token alone (2026-12-04): its fast path
	// must stay for a value that is the token alone, never a marked one.
	scriptMutant("the short release deletes a key its waiters queued on, waking and keeping nobody", (&wire.Op{Kind: wire.OpRelease}).Source(),
		"if v == ARGV[1] and (not ARGV[2] or", "if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] and (not ARGV[2] or"),
	scriptMutant("the short release wakes its waiters on channels no Client listens on", (&wire.Op{Kind: wire.OpRelease}).Source(),
		".. 'wake:'}", ".. 'wak:'}"),
	scriptMutant("release without its token check: deletes whoever holds the key", (&wire.Op{Kind: wire.OpRelease}).Source(), tokenCheck, ""),
	scriptMutant("a cooldown ignored: the release deletes the key at once", (&wire.Op{Kind: wire.OpRelease}).Source(), "if ARGV[2] ~= '0' then", "if false then"),
	scriptMutant("extend re-creates an expired key", (&wire.Op{Kind: wire.OpExtend}).Source(),
		"if not v or string.byte(v) == 0 then return 0 end", "if not v or string.byte(v) == 0 then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end"),
	{name: "a plain acquire without NX: takes the key whoever holds it", node: func(f *fakeNode) { f.plainOverwrites = true }},
	scriptMutant("acquire takes a held key", (&wire.Op{Kind: wire.OpAcquire}).Source(),
		"local v = redis.call('GET', KEYS[1])", "local v = false"),
	scriptMutant("fenced acquire hands out the counter unchanged", (&wire.Op{Kind: wire.OpAcquireFenced}).Source(),
		"f = c + ((tonumber(ARGV[4]) - c - 1) % m) + 1", "f = c"),
	{name: "the uncontended fenced grant takes a proposal at or below the counter (its ZADD without GT)", node: func(f *fakeNode) { f.zaddLowers = true }},
	scriptMutant("an election's grant hands out the counter unchanged", (&wire.Op{Kind: wire.OpAcquireFenced, Mode: wire.ModeElection}).Source(),
		"f = c + ((tonumber(ARGV[4]) - c - 1) % m) + 1", "f = c"),
	// Since candidates are granted by the resignation (2026-12-03) an
	// election's own attempts are fewer: caught at seeds 14 and 226 (twice)
	// on a quiet machine, and not in 300 beside a CPU hog (CI, 2026-12-04,
	// once the simulator's permits and sets carried metadata too); beside
	// a hog from three starts, the 17th, 38th and 98th tried. A budget of
	// its own.
	withBudget(1000, scriptMutant("an election's grant announces the proposal, taken or not", (&wire.Op{Kind: wire.OpAcquireFenced, Mode: wire.ModeElection}).Source(),
		"term .. '.1~'", "ARGV[6] .. '.1~'")),
	// A set's release reads a key's queue only where the holder's value
	// is Queued (2026-12-04, as the one-key release since 2026-11-28): a
	// set's look that leaves a held key's value unmarked leaves its
	// waiters asleep after that key's release.
	scriptMutant("a set's look leaves the holder's value unmarked", (&wire.Op{Kind: wire.OpQueue, Mode: wire.ModeSet}).Source(),
		"if not leaving then mark(k, v) end", ""),
	scriptMutant("a set is granted where only its last key is free", (&wire.Op{Kind: wire.OpAcquire, Mode: wire.ModeSet}).Source(),
		"local refused, again, reserved = free((ARGV[4] or ''))", "local refused, again, reserved = nil, false, false\nif redis.call('EXISTS', KEYS[#KEYS]) == 1 then refused = {-1, 'x'} end"),
	// An unqueued set's first attempt, arriving while a set has long been
	// first on one of its keys: caught at seeds 17, 20, 108 and 229 in four
	// runs, so it has a budget of its own (TestMultiLockTryLockRespectsQueue
	// builds the schedule).
	withBudget(1000, scriptMutant("the set's queue gate skipped: a set takes free keys whoever waits first", (&wire.Op{Kind: wire.OpAcquire, Mode: wire.ModeSet}).Source(),
		"if hs[i] and hs[i] ~= id and not refused then refused = {-1 - lefts[i], '', hs[i]} end", "")),
	withBudget(1000, scriptMutant("a reader enters ahead of a writer that waits before it", (&wire.Op{Kind: wire.OpAcquire, Mode: wire.ModeRead}).Source(),
		"if w then return refuse({-1 - left, '', w}) end", "")),
	// A reader let in by a writer's release (letin.go), and a writer
	// granted the key (the same rules). TestLetInMutantsCaught builds
	// schedules for the two validity mutants below, which the backing
	// check caught (2026-12-03: at seeds 12, 26 and 130, and 17, 26 and
	// 27, from three starts; never in 300 before it), and for the
	// reconnect's further down.
	{name: "a reader let in by a minority of nodes holds (issue 28)", code: mutLetInMinority},
	{name: "a reader let in where it does not hold keeps the admission (issue 28)", code: mutLetInKept},
	withBudget(1000, mutant{name: "a let-in's validity counts from the notices' arrival (issue 28)", code: mutLetInFromNotice}),
	withBudget(1000, mutant{name: "a let-in's validity counts from the last look, not the one the node names (issue 28)", code: mutLetInLastLook}),
	// With the read-write workload (2026-12-03): admissions counted past
	// a reconnect at seeds 127, 36, 7 and 12 from four starts (in the
	// mixed one at 805, and not in 1,000 from two other starts); grants
	// given back that still count at 65, 266, 14 and 186, by the backing
	// check. A writer's grants counted across its attempt
	// (mutGrantAfterAttempt) took 199 to 815 so: left out
	// (TestLetInMutantsCaught builds it).
	withBudget(1000, onReadWrite(mutant{name: "admissions count from a node whose subscription just reconnected (issue 28)", code: mutLetInUnguarded})),
	withBudget(1000, onReadWrite(mutant{name: "grants a waiter gave back still count (issue 28)", code: mutGiveBackCounts})),
	// A writer granted the key by a release (letin.go). Grants counted
	// across the writer's attempt the simulator does not catch in its
	// budget: TestLetInMutantsCaught builds the schedule.
	scriptMutant("an attempt takes a key granted to another waiter's place (issue 27)", (&wire.Op{Kind: wire.OpAcquire}).Source(),
		"(v == ARGV[4] or string.sub(v, 1, #ARGV[4] + 1) == ARGV[4] .. '\\0')", "string.find(v, '.wi', 1, true)"),
	// A grant that outlives the place it was made to (issue 27): a waiter
	// that died or was cut off keeps the key 10 s past its place's lapse.
	everywhere("a release's grant outlives the granted place's lapse (issue 27)",
		"redis.call('SET', k, redis.call('EXISTS', q) == 1 and addMark(v) or v, 'PX', string.format('%d', left))",
		"redis.call('SET', k, redis.call('EXISTS', q) == 1 and addMark(v) or v, 'PX', string.format('%d', left + 10000))"),
	// A fenced waiter granted the key by a release, with the releaser's
	// proposal for its token (fencedGrant, issue 27): the grant that
	// leaves the counter below the token the simulator did not catch in
	// 300 seeds (most fenced grants there have no token: two holders in
	// three are unfenced, and clocks ahead keep counters above the
	// others' proposals); TestFencedHandOffRaisesCounters builds it.
	// A waiter with metadata granted the key by a release, its metadata
	// beside its place's ID (2026-12-03): a grant that says it set the
	// metadata and did not, which the backing check sees. (A grant that
	// does not say so the waiter does not count: olderReleaseBroken.)
	everywhere("a release grants a waiter the key without its metadata, saying it did (issue 27)",
		"local v = meta and x .. '\\0' .. meta or x", "local v = x"),
	// A set granted its keys by their releases (letin.go).
	{name: "a set holds where one of its keys is granted on a majority (issue 28)", code: mutSetGrantAny},
	// A release that grants a set its other keys (wire's grantRest,
	// 2026-11-29) only where each is free, and the set first in its
	// queue. (Every copy: a release script defines the queue's functions
	// twice, once in the block that takes a place's ID out.) The grant
	// where another waiter is first the simulator does not catch in 300
	// seeds; TestSetGrantScripts does.
	everywhere("a release grants a set a key another token holds", "if v and string.byte(v) ~= 0 and not ours then return end", ""),
	// A set whose grants can never make a majority gives them back,
	// keeping its place (giveBackSet, 2026-11-29): the give-back that
	// takes the place out the simulator does not catch in 300 seeds (it
	// did at seed 54 in a first build, whose give-back also granted);
	// TestSetGiveBackKeepsPlace does.
	// Caught at seeds 11 to 68 from five starts, with the read-write
	// workload; at 27 to 681, and once not in about 700, with the mixed
	// one; never in 1,000 before stalls held notices alone (2026-12-03).
	withBudget(1000, onReadWrite(readerAttemptTakesLetIn)),
	scriptMutant("a reader is admitted beside a writer", (&wire.Op{Kind: wire.OpAcquire, Mode: wire.ModeRead}).Source(),
		"local v = redis.call('GET', KEYS[1])\nif v and string.byte(v) ~= 0 then", "local v = redis.call('GET', KEYS[1])\nif false then"),
}

var simBudget = flag.Int("sim.budget", 300, "seeds TestSimulationMutants gives each mutant (but those with a budget of their own)")

func withBudget(n int, m mutant) mutant { m.budget = n; return m }

// onReadWrite runs m with the read-write workload (mutant.rw).
func onReadWrite(m mutant) mutant { m.rw = true; return m }

// TestSimulationMutants: the simulator catches every mutant of the
// catalogue within its seed budget, and says how soon.
// It runs in a build with -tags redlock_mutants (make test runs it so,
// without the race detector), which the mutants of the library's own code
// need.
func TestSimulationMutants(t *testing.T) {
	if !mutantsBuilt {
		t.Skip("the catalogue runs with -tags redlock_mutants (make test)")
	}
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			activeMutants.Store(uint32(m.code))
			defer activeMutants.Store(0)
			start := time.Now()
			first, budget := *simFirst, *simBudget
			if m.budget > 0 {
				budget = m.budget
			}
			for seed := first; seed < first+uint64(budget); seed++ {
				var sim *simRun
				synctest.Test(t, func(t *testing.T) { sim = runSim(t, seed, m) })
				if v := sim.violations(); len(v) > 0 {
					t.Logf("caught at seed %d (the %d. tried) after %v: %s", seed, seed-first+1, time.Since(start).Round(time.Millisecond), v[0])
					return
				}
			}
			t.Errorf("not caught in %d seeds (%v)", budget, time.Since(start).Round(time.Millisecond))
		})
	}
}
