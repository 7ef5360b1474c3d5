package memnode

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCommands: the commands the scripts call, with Redis's replies, and
// expiry on the node's clock, in virtual time.
func TestCommands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		require.Equal(t, "OK", n.Do("SET", "k", "v", "PX", 100))
		require.Equal(t, "v", n.Do("GET", "k"))
		require.Equal(t, int64(100), n.Do("PTTL", "k"))
		time.Sleep(100 * time.Millisecond)
		require.Equal(t, int64(0), n.Do("PTTL", "k"), "alive while now = its expiry")
		time.Sleep(time.Millisecond)
		require.Nil(t, n.Do("GET", "k"), "gone once now > its expiry")
		require.Equal(t, int64(-2), n.Do("PTTL", "k"))
		require.Equal(t, "OK", n.Do("SET", "k", "v"))
		require.Equal(t, int64(-1), n.Do("PTTL", "k"))
		require.Equal(t, int64(1), n.Do("PEXPIRE", "k", 50))
		require.Equal(t, "OK", n.Do("SET", "k", "w", "KEEPTTL"))
		require.Equal(t, int64(50), n.Do("PTTL", "k"))
		require.Equal(t, int64(1), n.Do("EXISTS", "k"))
		require.Equal(t, int64(1), n.Do("DEL", "k", "nope"))

		at := time.Now().UnixMilli() + 70
		require.Equal(t, "OK", n.Do("SET", "k", "v", "PXAT", at))
		require.Equal(t, int64(70), n.Do("PTTL", "k"))
		require.Equal(t, "OK", n.Do("SET", "k", "v", "PXAT", at-100), "a time past: the key is gone")
		require.Nil(t, n.Do("GET", "k"))
		require.Equal(t, Error("ERR syntax error"), n.Do("SET", "k", "v", "PX", 10, "PXAT", at))

		require.Equal(t, int64(2), n.Do("ZADD", "z", 2, "b", 1, "a"))
		require.Equal(t, int64(0), n.Do("ZADD", "z", 3, "a"))
		require.Equal(t, []any{"b", "a"}, n.Do("ZRANGE", "z", 0, -1))
		require.Equal(t, []any{"a", "3"}, n.Do("ZRANGE", "z", -1, -1, "WITHSCORES"))
		require.Equal(t, "2", n.Do("ZSCORE", "z", "b"))
		require.Equal(t, int64(1), n.Do("ZCOUNT", "z", "(2", "+inf"))
		require.Equal(t, int64(1), n.Do("ZREMRANGEBYSCORE", "z", "-inf", 2))
		require.Equal(t, int64(1), n.Do("ZREM", "z", "a"))
		require.Equal(t, int64(0), n.Do("EXISTS", "z"), "an emptied sorted set is gone")

		require.Equal(t, "OK", n.Do("SET", "s", "x"))
		require.Equal(t, errWrongType, n.Do("ZADD", "s", 1, "m"))
		n.Do("ZADD", "z", 1, "m")
		require.Equal(t, errWrongType, n.Do("GET", "z"))
		require.IsType(t, Error(""), n.Do("NOPE"))
		tm := n.Do("TIME").([]any)
		require.Len(t, tm, 2)
	})
}

// TestScripts: EVAL and EVALSHA with the script cache, conversions both
// ways, redis.call errors raised and redis.pcall errors returned,
// error_reply, and globals a script may not create.
func TestScripts(t *testing.T) {
	n := New()
	src := `redis.call('SET', KEYS[1], ARGV[1]); return {1, 'two', false, 3.9, redis.call('GET', KEYS[1])}`
	want := []any{int64(1), "two", nil, int64(3), "v"}
	require.Equal(t, want, n.Do("EVAL", src, 1, "k", "v"), "false is nil, numbers truncate")
	sha := sha1Hex(src)
	require.Equal(t, want, n.Do("EVALSHA", sha, 1, "k", "v"))
	require.Equal(t, []any{int64(1)}, n.Do("EVAL", `return {1, nil, 3}`, 0), "an array ends at the first nil")
	require.Equal(t, Error("NOSCRIPT No matching script. Please use EVAL."), n.Do("EVALSHA", sha1Hex("x"), 0))
	require.Equal(t, int64(3), n.Do("EVAL", `return 3.9`, 0), "numbers truncate")
	require.Equal(t, "OK", n.Do("EVAL", `return redis.call('SET', 'a', 'b')`, 0), "a status stays a status")
	require.Nil(t, n.Do("EVAL", `return redis.call('GET', 'missing')`, 0), "nil becomes false becomes nil")
	require.Equal(t, int64(1700000000123), n.Do("EVAL", `redis.call('ZADD', 'z', 1700000000123, 'm') return tonumber(redis.call('ZSCORE', 'z', 'm'))`, 0), "numbers pass whole")
	require.Equal(t, errWrongType, n.Do("EVAL", `return redis.call('GET', 'z')`, 0))
	require.Equal(t, "WRONGTYPE", n.Do("EVAL", `local r = redis.pcall('GET', 'z') return string.sub(r.err, 1, 9)`, 0))
	require.Equal(t, Error("FENCE bad"), n.Do("EVAL", `return redis.error_reply('FENCE bad')`, 0))
	require.Contains(t, string(n.Do("EVAL", `x = 1`, 0).(Error)), "Script attempted to create global variable")
	require.Contains(t, string(n.Do("EVAL", `return y`, 0).(Error)), "nonexistent global variable")
	require.Contains(t, string(n.Do("EVAL", `return (`, 0).(Error)), "ERR Error compiling script")
	require.Contains(t, string(n.Do("EVAL", `return redis.call('EVAL', 'return 1', 0)`, 0).(Error)), "Unknown Redis command called from script")
	require.Equal(t, "OK", n.Do("SCRIPT", "FLUSH"))
	require.IsType(t, Error(""), n.Do("EVALSHA", sha, 1, "k", "v"))
}

// TestPublishAndFaults: messages published by a script reach subscribers
// after the script; a restart changes the run_id and keeps the keys or
// not; a fast clock expires keys early.
func TestPublishAndFaults(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		var got []string
		stop := n.Subscribe("ch", func(c, p string) { got = append(got, c+"="+p) })
		require.Equal(t, int64(1), n.Do("EVAL", `return redis.call('PUBLISH', 'ch', 'hi')`, 0))
		require.Equal(t, []string{"ch=hi"}, got)
		stop()
		require.Equal(t, int64(0), n.Do("PUBLISH", "ch", "again"))

		id := n.RunID()
		n.Do("SET", "k", "v")
		n.Restart(true)
		require.NotEqual(t, id, n.RunID())
		require.Equal(t, "v", n.Do("GET", "k"))
		n.Restart(false)
		require.Nil(t, n.Do("GET", "k"))

		n.Do("SET", "k", "v", "PX", 1000)
		n.SetClockRate(10)
		time.Sleep(101 * time.Millisecond)
		require.Nil(t, n.Do("GET", "k"), "a clock 10 times fast expires 1 s in 100 ms")
	})
}

func TestKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New()
		n.Do("SET", "b", "1", "PX", 10)
		n.Do("SET", "a", "1")
		n.Do("ZADD", "z", 1, "m")
		if got := n.Keys(); !slices.Equal(got, []string{"a", "b", "z"}) {
			t.Fatalf("Keys() = %q", got)
		}
		time.Sleep(11 * time.Millisecond)
		if got := n.Keys(); !slices.Equal(got, []string{"a", "z"}) {
			t.Fatalf("after b expired: Keys() = %q", got)
		}
	})
}
