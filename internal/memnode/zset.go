package memnode

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// The sorted-set commands the scripts call: ZADD, ZREM, ZSCORE, ZRANGE
// (by index), ZCOUNT and ZREMRANGEBYSCORE, with Redis's order (score, then
// member bytewise) and its formatting of scores.

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

// zadd is ZADD key [NX|XX] [GT|LT] [CH] score member [score member …]
// (not INCR): GT and LT update a member only to a greater (lesser) score
// and still add new members; CH counts the members changed, not only
// those added.
func (n *Node) zadd(a []string) reply {
	key := a[0]
	f, a, bad := zaddFlags(a[1:])
	if bad != nil {
		return bad
	}
	z, bad := n.zsetAt(key)
	if bad != nil {
		return bad
	}
	scores := make([]float64, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		s, err := strconv.ParseFloat(a[i], 64)
		if err != nil || math.IsNaN(s) {
			return Error("ERR value is not a valid float")
		}
		scores = append(scores, s)
	}
	if z == nil {
		if f.xx {
			return int64(0)
		}
		z = map[string]float64{}
		n.keys[key] = &entry{zset: z}
	}
	var added, changed int64
	for i := 0; i < len(a); i += 2 {
		m, s := a[i+1], scores[i/2]
		old, ok := z[m]
		switch {
		case !ok && f.xx, ok && f.nx, ok && f.gt && s <= old, ok && f.lt && s >= old:
			continue
		case !ok:
			added++
		case s != old:
			changed++
		}
		z[m] = s
	}
	n.dropEmpty(key, z)
	if f.ch {
		return added + changed
	}
	return added
}

// zaddOpts are ZADD's options.
type zaddOpts struct{ nx, xx, gt, lt, ch bool }

// zaddFlags reads ZADD's options off the front of its arguments, and
// checks what is left: score and member pairs.
func zaddFlags(a []string) (f zaddOpts, rest []string, bad reply) {
flags:
	for len(a) > 0 {
		switch upper(a[0]) {
		case "NX":
			f.nx = true
		case "XX":
			f.xx = true
		case "GT":
			f.gt = true
		case "LT":
			f.lt = true
		case "CH":
			f.ch = true
		default:
			break flags
		}
		a = a[1:]
	}
	switch {
	case len(a) == 0 || len(a)%2 != 0:
		return f, nil, errSyntax
	case f.nx && f.xx:
		return f, nil, Error("ERR XX and NX options at the same time are not compatible")
	case f.nx && (f.gt || f.lt) || f.gt && f.lt:
		return f, nil, Error("ERR GT, LT, and/or NX options at the same time are not compatible")
	}
	return f, a, nil
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
