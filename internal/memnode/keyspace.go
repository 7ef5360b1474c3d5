package memnode

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// This file is the keyspace and the commands the library's scripts call,
// with Redis 7's replies: strings, sorted sets, expiry in milliseconds.

// entry is one key: a string, or a sorted set.
type entry struct {
	str    string
	zset   map[string]float64 // nil for a string
	expire int64              // ms since the epoch on the node's clock; 0: no TTL
}

// reply is a command's reply: int64, string (bulk), Status, nil, []any, or
// an error reply (Error).
type reply = any

// Error is an error reply: its text starts with the error's code
// (ERR, WRONGTYPE, NOSCRIPT, …), as Redis's do.
type Error string

func (e Error) Error() string { return string(e) }

// RedisError marks Error as a reply from the server, as go-redis's own
// error replies are (go-redis's redis.Error interface).
func (e Error) RedisError() {}

const (
	errWrongType = Error("WRONGTYPE Operation against a key holding the wrong kind of value")
	errSyntax    = Error("ERR syntax error")
	errNotInt    = Error("ERR value is not an integer or out of range")
	errNotFloat  = Error("ERR min or max is not a float")
)

func errArgs(cmd string) Error {
	return Error("ERR wrong number of arguments for '" + strings.ToLower(cmd) + "' command")
}

// live returns the entry at key, dropping it if it has expired (Redis: a
// key is gone once now > its expiry). Callers hold the node's lock.
func (n *Node) live(key string) *entry {
	e, ok := n.keys[key]
	if !ok {
		return nil
	}
	if e.expire != 0 && n.nowMs() > e.expire {
		delete(n.keys, key)
		return nil
	}
	return e
}

// command runs one command on the keyspace; callers hold the node's lock.
func (n *Node) command(args []string) reply {
	if len(args) == 0 {
		return Error("ERR wrong number of arguments")
	}
	name := strings.ToUpper(args[0])
	f, ok := commands[name]
	if !ok {
		return Error("ERR unknown command '" + args[0] + "'")
	}
	if len(args)-1 < f.min || f.max >= 0 && len(args)-1 > f.max {
		return errArgs(name)
	}
	return f.run(n, args[1:])
}

// commands: each with its least and most argument counts (−1: no most).
var commands = map[string]struct {
	min, max int
	run      func(n *Node, a []string) reply
}{
	"GET":              {1, 1, (*Node).get},
	"SET":              {2, -1, (*Node).set},
	"DEL":              {1, -1, (*Node).del},
	"EXISTS":           {1, -1, (*Node).exists},
	"PEXPIRE":          {2, 2, (*Node).pexpire},
	"PTTL":             {1, 1, (*Node).pttl},
	"TIME":             {0, 0, (*Node).time},
	"PUBLISH":          {2, 2, (*Node).publishCmd},
	"ZADD":             {3, -1, (*Node).zadd},
	"ZREM":             {2, -1, (*Node).zrem},
	"ZSCORE":           {2, 2, (*Node).zscore},
	"ZRANGE":           {3, 4, (*Node).zrange},
	"ZCOUNT":           {3, 3, (*Node).zcount},
	"ZREMRANGEBYSCORE": {3, 3, (*Node).zremrangebyscore},
}

func (n *Node) get(a []string) reply {
	e := n.live(a[0])
	switch {
	case e == nil:
		return nil
	case e.zset != nil:
		return errWrongType
	}
	return e.str
}

// set is SET key value [PX ms | KEEPTTL] [NX | XX].
func (n *Node) set(a []string) reply {
	var px int64
	keep, nx, xx := false, false, false
	for i := 2; i < len(a); i++ {
		switch strings.ToUpper(a[i]) {
		case "PX":
			if i+1 == len(a) {
				return errSyntax
			}
			i++
			v, err := strconv.ParseInt(a[i], 10, 64)
			if err != nil {
				return errNotInt
			}
			if v <= 0 {
				return Error("ERR invalid expire time in 'set' command")
			}
			px = v
		case "KEEPTTL":
			keep = true
		case "NX":
			nx = true
		case "XX":
			xx = true
		default:
			return errSyntax
		}
	}
	if nx && xx || keep && px != 0 {
		return errSyntax
	}
	old := n.live(a[0])
	if nx && old != nil || xx && old == nil {
		return nil
	}
	e := &entry{str: a[1]}
	switch {
	case px != 0:
		e.expire = n.nowMs() + px
	case keep && old != nil:
		e.expire = old.expire
	}
	n.keys[a[0]] = e
	return Status("OK")
}

func (n *Node) del(a []string) reply {
	var c int64
	for _, k := range a {
		if n.live(k) != nil {
			delete(n.keys, k)
			c++
		}
	}
	return c
}

func (n *Node) exists(a []string) reply {
	var c int64
	for _, k := range a {
		if n.live(k) != nil {
			c++
		}
	}
	return c
}

func (n *Node) pexpire(a []string) reply {
	ms, err := strconv.ParseInt(a[1], 10, 64)
	if err != nil {
		return errNotInt
	}
	e := n.live(a[0])
	if e == nil {
		return int64(0)
	}
	if ms <= 0 {
		delete(n.keys, a[0])
		return int64(1)
	}
	e.expire = n.nowMs() + ms
	return int64(1)
}

func (n *Node) pttl(a []string) reply {
	e := n.live(a[0])
	switch {
	case e == nil:
		return int64(-2)
	case e.expire == 0:
		return int64(-1)
	}
	return e.expire - n.nowMs()
}

// time is TIME: seconds and microseconds, as bulk strings.
func (n *Node) time(a []string) reply {
	us := n.nowUs()
	return []any{strconv.FormatInt(us/1e6, 10), strconv.FormatInt(us%1e6, 10)}
}

func (n *Node) publishCmd(a []string) reply {
	n.outbox = append(n.outbox, message{a[0], a[1]})
	return int64(n.subscribers(a[0]))
}

// zset returns the sorted set at key (nil if there is none), or
// errWrongType.
func (n *Node) zsetAt(key string) (map[string]float64, reply) {
	e := n.live(key)
	switch {
	case e == nil:
		return nil, nil
	case e.zset == nil:
		return nil, errWrongType
	}
	return e.zset, nil
}

// zadd is ZADD key score member [score member …].
func (n *Node) zadd(a []string) reply {
	if len(a)%2 != 1 {
		return errSyntax
	}
	z, bad := n.zsetAt(a[0])
	if bad != nil {
		return bad
	}
	scores := make([]float64, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		s, err := strconv.ParseFloat(a[i], 64)
		if err != nil || math.IsNaN(s) {
			return Error("ERR value is not a valid float")
		}
		scores = append(scores, s)
	}
	if z == nil {
		z = map[string]float64{}
		n.keys[a[0]] = &entry{zset: z}
	}
	var added int64
	for i := 1; i < len(a); i += 2 {
		if _, ok := z[a[i+1]]; !ok {
			added++
		}
		z[a[i+1]] = scores[i/2]
	}
	return added
}

// dropEmpty deletes the sorted set at key when it has no members left, as
// Redis does.
func (n *Node) dropEmpty(key string, z map[string]float64) {
	if len(z) == 0 {
		delete(n.keys, key)
	}
}

func (n *Node) zrem(a []string) reply {
	z, bad := n.zsetAt(a[0])
	if bad != nil || z == nil {
		return orZero(bad)
	}
	var c int64
	for _, m := range a[1:] {
		if _, ok := z[m]; ok {
			delete(z, m)
			c++
		}
	}
	n.dropEmpty(a[0], z)
	return c
}

func orZero(r reply) reply {
	if r == nil {
		return int64(0)
	}
	return r
}

func (n *Node) zscore(a []string) reply {
	z, bad := n.zsetAt(a[0])
	if bad != nil || z == nil {
		return bad
	}
	s, ok := z[a[1]]
	if !ok {
		return nil
	}
	return formatScore(s)
}

// sorted returns a sorted set's members in Redis's order: by score, then
// by member, bytewise.
func sorted(z map[string]float64) []string {
	ms := make([]string, 0, len(z))
	for m := range z {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b string) int {
		if z[a] != z[b] {
			if z[a] < z[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return ms
}

// zrange is ZRANGE key start stop [WITHSCORES], by index.
func (n *Node) zrange(a []string) reply {
	withScores := len(a) == 4
	if withScores && !strings.EqualFold(a[3], "WITHSCORES") {
		return errSyntax
	}
	start, err1 := strconv.Atoi(a[1])
	stop, err2 := strconv.Atoi(a[2])
	if err1 != nil || err2 != nil {
		return errNotInt
	}
	z, bad := n.zsetAt(a[0])
	if bad != nil {
		return bad
	}
	ms := sorted(z)
	if start < 0 {
		start = max(len(ms)+start, 0)
	}
	if stop < 0 {
		stop = len(ms) + stop
	}
	stop = min(stop, len(ms)-1)
	out := []any{}
	for i := start; i <= stop; i++ {
		out = append(out, ms[i])
		if withScores {
			out = append(out, formatScore(z[ms[i]]))
		}
	}
	return out
}

// scoreBound parses a ZCOUNT or ZREMRANGEBYSCORE bound: a number, "(" and
// a number (exclusive), or ±inf.
func scoreBound(s string) (v float64, exclusive bool, ok bool) {
	if rest, cut := strings.CutPrefix(s, "("); cut {
		s, exclusive = rest, true
	}
	switch strings.ToLower(s) {
	case "+inf", "inf":
		return math.Inf(1), exclusive, true
	case "-inf":
		return math.Inf(-1), exclusive, true
	}
	v, err := strconv.ParseFloat(s, 64)
	return v, exclusive, err == nil && !math.IsNaN(v)
}

// inRange returns the members of the sorted set at a[0] whose score lies
// between a[1] and a[2].
func (n *Node) inRange(a []string) (z map[string]float64, in []string, r reply) {
	lo, loX, ok1 := scoreBound(a[1])
	hi, hiX, ok2 := scoreBound(a[2])
	if !ok1 || !ok2 {
		return nil, nil, errNotFloat
	}
	z, bad := n.zsetAt(a[0])
	if bad != nil {
		return nil, nil, bad
	}
	for m, s := range z {
		if (s > lo || !loX && s == lo) && (s < hi || !hiX && s == hi) {
			in = append(in, m)
		}
	}
	return z, in, nil
}

func (n *Node) zcount(a []string) reply {
	_, in, bad := n.inRange(a)
	if bad != nil {
		return bad
	}
	return int64(len(in))
}

func (n *Node) zremrangebyscore(a []string) reply {
	z, in, bad := n.inRange(a)
	if bad != nil {
		return bad
	}
	for _, m := range in {
		delete(z, m)
	}
	if z != nil {
		n.dropEmpty(a[0], z)
	}
	return int64(len(in))
}

// formatScore writes a score as Redis 7 does: the shortest form that
// reads back the same, whole numbers without an exponent.
func formatScore(s float64) string {
	switch {
	case math.IsInf(s, 1):
		return "inf"
	case math.IsInf(s, -1):
		return "-inf"
	case s == math.Trunc(s) && math.Abs(s) < 1e17:
		return strconv.FormatFloat(s, 'f', -1, 64)
	}
	return strconv.FormatFloat(s, 'g', 17, 64)
}
