package memnode

import (
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

// set is SET key value [PX ms | PXAT unix-ms | KEEPTTL] [NX | XX].
func (n *Node) set(a []string) reply {
	var px, pxat int64
	keep, nx, xx := false, false, false
	for i := 2; i < len(a); i++ {
		switch opt := strings.ToUpper(a[i]); opt {
		case "PX", "PXAT":
			if i+1 == len(a) || px != 0 || pxat != 0 {
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
			if opt == "PX" {
				px = v
			} else {
				pxat = v
			}
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
	if nx && xx || keep && (px != 0 || pxat != 0) {
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
	case pxat != 0:
		e.expire = pxat // in the past: the key is gone at its next look
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
