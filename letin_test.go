package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/wire"
)

// TestLetInScripts holds the scripts of a reader let in by a writer's
// release (letin.go) to their answers on a real redis-server: the release
// lets in the live readers at the front that understand it (".ri"), each
// until its place's lapse, wakes an older Client's reader as before, stops
// at the first writer, and hands the reservation on; a let-in reader's
// look answers LetIn without putting its place back; a release by a
// place's ID takes the place out too.
func TestLetInScripts(t *testing.T) {
	rc, run := scriptNode(t)
	ctx := t.Context()
	const lease, ttl = time.Minute, time.Minute
	key := "redlock:{doc}"
	look := func(mode wire.Mode, id string, ticket, seq int64) any {
		return run(placeLook(key, mode, id, ticket, seq, lease))
	}
	release := func(mode wire.Mode, token string) any {
		o := wire.NewOp(wire.OpRelease, key, token, "", 0)
		o.Mode, o.Wake = mode, "redlock:wake:"
		return run(o)
	}
	score := func(zkey, member string) float64 { return rc.ZScore(ctx, zkey, member).Val() }

	w := wire.NewOp(wire.OpAcquire, key, "wtok", "wtok", ttl)
	w.Mode = wire.ModeWrite
	require.Equal(t, int64(1), run(w))
	look(wire.ModeRead, "c.ri1", 100, 6)
	look(wire.ModeRead, "c.ri1", 100, 7) // its last look: the one a let-in names
	look(wire.ModeRead, "d.r2", 200, 0)  // an older Client's reader
	look(wire.ModeRead, "c.ri3", 300, 9)
	look(wire.ModeWrite, "e.4", 400, 0)
	look(wire.ModeRead, "c.ri5", 500, 3)
	require.Greater(t, rc.PTTL(ctx, key+":seq").Val(), 55*time.Second, "the looks' numbers expire with their places")
	lapse1, lapse3 := score(key+":lease", "c.ri1"), score(key+":lease", "c.ri3")

	notice := noticesOn(t, rc, "redlock:wake:c", "redlock:wake:d")
	require.Equal(t, []any{int64(1), "c.ri1"}, release(wire.ModeWrite, "wtok"))

	require.Equal(t, lapse1, score(key+":readers", "c.ri1"), "let in until its place's lapse")
	require.Equal(t, lapse3, score(key+":readers", "c.ri3"))
	require.Equal(t, []string{"c.ri1", "c.ri3"}, rc.ZRange(ctx, key+":readers", 0, -1).Val(), "not the reader behind the writer")
	require.Equal(t, []string{"d.r2", "e.4", "c.ri5"}, rc.ZRange(ctx, key+":queue", 0, -1).Val(), "the let-in places are out; the older reader's stays")
	require.Greater(t, rc.PTTL(ctx, key+":readers").Val(), 55*time.Second, "the readers' set lives as long as its entries")
	v, err := rc.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "\x00wtok", v, "still reserved for the waiters left, in the name of the release")

	got := map[string]bool{}
	for range 3 {
		got[notice()] = true
	}
	require.Equal(t, map[string]bool{
		"redlock:wake:c " + key + "\x00" + wire.LetIn + "7\x00c.ri1": true,
		"redlock:wake:c " + key + "\x00" + wire.LetIn + "9\x00c.ri3": true,
		"redlock:wake:d " + key + "\x00wtok\x00d.r2":                 true,
	}, got)

	require.Equal(t, []string{"c.ri5"}, rc.ZRange(ctx, key+":seq", 0, -1).Val(), "a let-in's number goes with its place")
	r := look(wire.ModeRead, "c.ri1", 100, 8).([]any)
	require.Equal(t, wire.LetIn, r[0], "a let-in reader's look says so")
	require.Equal(t, int64(-2), r[2])
	require.NotContains(t, rc.ZRange(ctx, key+":queue", 0, -1).Val(), "c.ri1", "and does not put its place back")

	require.Equal(t, int64(1), release(wire.ModeRead, "c.ri1"))
	require.Equal(t, int64(0), release(wire.ModeRead, "c.ri5"), "a place never let in: nothing to release")
	require.Equal(t, []string{"d.r2", "e.4"}, rc.ZRange(ctx, key+":queue", 0, -1).Val(), "but its place goes")
	require.Empty(t, rc.ZRange(ctx, key+":seq", 0, -1).Val(), "and its look's number")

	// A reservation made for a let-in place goes to the place after it, or
	// goes when there is none.
	solo := "redlock:{solo}"
	w = wire.NewOp(wire.OpAcquire, solo, "w2", "w2", ttl)
	w.Mode = wire.ModeWrite
	require.Equal(t, int64(1), run(w))
	key = solo
	look(wire.ModeRead, "c.ri6", 600, 1)
	require.Equal(t, []any{int64(1), "c.ri6"}, release(wire.ModeWrite, "w2"))
	require.Equal(t, int64(0), rc.Exists(ctx, solo).Val(), "nobody left to reserve the key for")
	require.Equal(t, []string{"c.ri6"}, rc.ZRange(ctx, solo+":readers", 0, -1).Val())

	// A reader that looked and then enters by its own attempt takes its
	// look's number out with its place.
	key = "redlock:{entered}"
	look(wire.ModeRead, "c.ri7", 700, 4)
	a := wire.NewOp(wire.OpAcquire, key, "rtok", "rtok", ttl)
	a.Mode, a.Place = wire.ModeRead, &wire.Place{ID: "c.ri7", Ticket: 700, Lease: lease}
	require.Equal(t, int64(1), run(a))
	require.Empty(t, rc.ZRange(ctx, key+":queue", 0, -1).Val())
	require.Empty(t, rc.ZRange(ctx, key+":seq", 0, -1).Val(), "its look's number goes with its place")
}

// TestLetInReaderAttemptEnters: a reader let in by a release whose
// let-ins did not count (their notices late, or from a node the restart
// guard has yet to hear of) attempts; where it was let in, its attempt
// enters, though a writer has come to wait ahead of it since, by its
// token beside the let-in, which a take-back of the token (the attempt
// failed) leaves (readerAttemptBroken has why). Before, the attempt was refused there
// while its let-in kept that writer out, until the place lapsed
// (integration's TestRWMutexGrantsSplitBetweenWaiters, once in about
// 1,000 runs beside a CPU hog).
func TestLetInReaderAttemptEnters(t *testing.T) {
	rc, run := scriptNode(t)
	ctx := t.Context()
	const lease, ttl = time.Minute, time.Minute
	key := "redlock:{doc}"
	look := func(mode wire.Mode, id string, ticket, seq int64) any {
		return run(placeLook(key, mode, id, ticket, seq, lease))
	}
	w := wire.NewOp(wire.OpAcquire, key, "wtok", "wtok", ttl)
	w.Mode = wire.ModeWrite
	require.Equal(t, int64(1), run(w))
	look(wire.ModeRead, "c.ri1", 200, 1)
	release := wire.NewOp(wire.OpRelease, key, "wtok", "", 0)
	release.Mode, release.Wake = wire.ModeWrite, "redlock:wake:"
	run(release) // lets c.ri1 in
	require.NotZero(t, rc.ZScore(ctx, key+":readers", "c.ri1").Val(), "let in")
	look(wire.ModeWrite, "d.wi1", 100, 1) // a writer with an earlier ticket: first now
	attempt := wire.NewOp(wire.OpAcquire, key, "rtok", "rtok", ttl)
	attempt.Mode, attempt.Place = wire.ModeRead, &wire.Place{ID: "c.ri1", Ticket: 200, Lease: lease}
	require.Equal(t, int64(1), run(attempt), "where it was let in, it enters")
	require.Equal(t, []string{"c.ri1", "rtok"}, rc.ZRange(ctx, key+":readers", 0, -1).Val(), "by its token, beside its let-in")
	require.Equal(t, []string{"d.wi1"}, rc.ZRange(ctx, key+":queue", 0, -1).Val())
	takeBack := wire.NewOp(wire.OpRelease, key, "rtok", "", 0)
	takeBack.Mode = wire.ModeRead
	require.Equal(t, int64(1), run(takeBack), "a failed attempt's take-back")
	require.Equal(t, []string{"c.ri1"}, rc.ZRange(ctx, key+":readers", 0, -1).Val(), "the let-in stays: the Client may yet hold by it")
	other := wire.NewOp(wire.OpAcquire, key, "r2", "r2", ttl)
	other.Mode, other.Place = wire.ModeRead, &wire.Place{ID: "c.ri2", Ticket: 300, Lease: lease}
	require.NotEqual(t, int64(1), run(other), "a reader not let in waits behind the writer")
}
