package redlock

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/internal/wire"
)

// TestLookNumbersGoWithPlaces: the look's number a place keeps beside it
// (KEY:seq, which a release's grant or let-in names) goes whenever the
// place goes, on a real redis-server: by a leave (a reader or writer that
// won by its attempt, where a node refused it), by its lapse, and by a
// release of its ID after either. Before, a leave and a lapse left it, and
// every new place's look put off the set's expiry: on a busy key they
// piled up (integration's read-write split test found one after every
// Unlock).
func TestLookNumbersGoWithPlaces(t *testing.T) {
	rc, run := scriptNode(t)
	ctx := t.Context()
	key := "redlock:{doc}"
	look := func(mode wire.Mode, id string, ticket, seq int64, lease time.Duration) {
		run(placeLook(key, mode, id, ticket, seq, lease))
	}
	numbers := func() []string { return rc.ZRange(ctx, key+":seq", 0, -1).Val() }
	w := wire.NewOp(wire.OpAcquire, key, "wtok", "wtok", time.Minute)
	require.Equal(t, int64(1), run(w))

	look(wire.ModeRead, "c.ri1", 100, 5, time.Minute)
	look(wire.ModeWrite, "c.wi2", 200, 6, time.Minute)
	require.ElementsMatch(t, []string{"c.ri1", "c.wi2"}, numbers())
	look(wire.ModeRead, "c.ri1", 0, 0, time.Minute)
	require.Equal(t, []string{"c.wi2"}, numbers(), "a reader's leave")
	look(wire.ModeWrite, "c.wi2", 0, 0, time.Minute)
	require.Empty(t, numbers(), "a writer's leave")

	look(wire.ModeWrite, "c.wi3", 300, 7, 20*time.Millisecond)
	look(wire.ModeWrite, "c.wi5", 500, 9, time.Minute) // (the set lives on)
	time.Sleep(100 * time.Millisecond)
	look(wire.ModeWrite, "c.wi4", 400, 8, time.Minute)
	require.ElementsMatch(t, []string{"c.wi4", "c.wi5"}, numbers(), "a lapsed place's")

	look(wire.ModeWrite, "c.wi4", 0, 0, time.Minute)
	look(wire.ModeWrite, "c.wi5", 0, 0, time.Minute)
	require.NoError(t, rc.ZAdd(ctx, key+":seq", redis.Z{Score: 8, Member: "c.wi4"}).Err()) // as a leave before this change left it
	release := wire.NewOp(wire.OpRelease, key, "c.wi4", "", 0)
	release.Wake = "redlock:wake:"
	require.Equal(t, int64(-1), run(release), "held by another token")
	require.Empty(t, numbers(), "a release by the ID of a place no longer queued")

	// The key held by a place's ID alone (granted it, with no place left
	// behind: unmarked), as the uncontended release's fast path finds a
	// token's: a release by the ID still takes its number out (Op.release
	// keeps it off the fast path).
	require.NoError(t, rc.Set(ctx, key, "c.wi6", time.Minute).Err())
	require.NoError(t, rc.ZAdd(ctx, key+":seq", redis.Z{Score: 10, Member: "c.wi6"}).Err())
	release = wire.NewOp(wire.OpRelease, key, "c.wi6", "", 0)
	release.Wake = "redlock:wake:"
	require.Equal(t, int64(1), run(release))
	require.Empty(t, numbers(), "a release by the ID of a place that holds the key")
}
