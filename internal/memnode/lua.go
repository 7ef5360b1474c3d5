package memnode

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// This file runs scripts as Redis 7 does: EVAL and EVALSHA, KEYS and ARGV,
// redis.call and redis.pcall, redis.error_reply and redis.status_reply, the
// conversions between Redis replies and Lua values both ways, and globals
// that a script may read but not create.

// Status is a status reply ("OK"): a string to the client, a table with an
// ok field to a script.
type Status string

type script struct {
	proto *lua.FunctionProto
}

// engine is a Lua state, lent to one node's script at a time (the node's
// lock held): a script cannot keep state between runs (no globals), so
// nodes share a pool of them, and a test that makes thousands of nodes
// makes few.
type engine struct {
	L    *lua.LState
	node *Node
}

var engines = sync.Pool{New: func() any { return newEngine() }}

func newEngine() *engine {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 64, RegistrySize: 1024, RegistryMaxSize: 1 << 20, MinimizeStackMemory: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	e := &engine{L: L}
	r := L.NewTable()
	L.SetField(r, "call", L.NewFunction(func(L *lua.LState) int { return e.call(L, false) }))
	L.SetField(r, "pcall", L.NewFunction(func(L *lua.LState) int { return e.call(L, true) }))
	L.SetField(r, "error_reply", L.NewFunction(func(L *lua.LState) int { return field(L, "err") }))
	L.SetField(r, "status_reply", L.NewFunction(func(L *lua.LState) int { return field(L, "ok") }))
	L.SetField(r, "sha1hex", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LString(sha1Hex(L.CheckString(1))))
		return 1
	}))
	g := L.G.Global
	g.RawSetString("redis", r)
	g.RawSetString("KEYS", L.NewTable())
	g.RawSetString("ARGV", L.NewTable())
	// As Redis: reading an unset global is an error, and so is setting one.
	mt := L.NewTable()
	L.SetField(mt, "__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckString(2))
		return 0
	}))
	L.SetField(mt, "__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to create global variable '%s'", L.CheckString(2))
		return 0
	}))
	L.SetMetatable(g, mt)
	return e
}

// field returns a table with key set to the first argument: error_reply
// and status_reply.
func field(L *lua.LState, key string) int {
	t := L.NewTable()
	L.SetField(t, key, lua.LString(L.CheckString(1)))
	L.Push(t)
	return 1
}

func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// eval is EVAL (script source) or EVALSHA (its SHA1): script numkeys
// keys… args…. Callers hold the node's lock.
func (n *Node) eval(a []string, bySHA bool) reply {
	if len(a) < 2 {
		return errArgs(map[bool]string{false: "eval", true: "evalsha"}[bySHA])
	}
	var s *script
	if bySHA {
		if s = n.scripts[strings.ToLower(a[0])]; s == nil {
			return Error("NOSCRIPT No matching script. Please use EVAL.")
		}
	} else {
		sha := sha1Hex(a[0])
		if s = n.scripts[sha]; s == nil {
			var err error
			if s, err = compile(a[0]); err != nil {
				return Error("ERR Error compiling script (new function): " + err.Error())
			}
			n.scripts[sha] = s
		}
	}
	numkeys, err := strconv.Atoi(a[1])
	switch {
	case err != nil:
		return errNotInt
	case numkeys < 0:
		return Error("ERR Number of keys can't be negative")
	case numkeys > len(a)-2:
		return Error("ERR Number of keys can't be greater than number of args")
	}
	e := engines.Get().(*engine)
	defer engines.Put(e)
	e.node = n
	defer func() { e.node = nil }()
	return e.run(s, a[2:2+numkeys], a[2+numkeys:])
}

// compiled holds every script compiled in the process, by source: byte
// code is read-only, and gopher-lua lets LStates share it, so a test that
// makes thousands of nodes compiles each script once.
var compiled sync.Map // string → *script

func compile(src string) (*script, error) {
	if s, ok := compiled.Load(src); ok {
		return s.(*script), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "@user_script")
	if err != nil {
		return nil, err
	}
	proto, err := lua.Compile(chunk, "@user_script")
	if err != nil {
		return nil, err
	}
	s, _ := compiled.LoadOrStore(src, &script{proto: proto})
	return s.(*script), nil
}

// run runs a compiled script with KEYS and ARGV, and converts what it
// returns (or the error it raised) to a reply.
func (e *engine) run(s *script, keys, args []string) reply {
	L := e.L
	defer L.SetTop(0)
	g := L.G.Global
	g.RawSetString("KEYS", strings2table(L, keys))
	g.RawSetString("ARGV", strings2table(L, args))
	L.Push(L.NewFunctionFromProto(s.proto))
	if err := L.PCall(0, 1, nil); err != nil {
		var apiErr *lua.ApiError
		if errors.As(err, &apiErr) {
			if t, ok := apiErr.Object.(*lua.LTable); ok {
				if msg, ok := t.RawGetString("err").(lua.LString); ok {
					return Error(string(msg)) // redis.call's error, raised
				}
			}
			return Error("ERR " + apiErr.Object.String())
		}
		return Error("ERR " + err.Error())
	}
	return fromLua(L.Get(-1))
}

func strings2table(L *lua.LState, ss []string) *lua.LTable {
	t := L.CreateTable(len(ss), 0)
	for _, s := range ss {
		t.Append(lua.LString(s))
	}
	return t
}

// call is redis.call (protected: redis.pcall): it runs a command on the
// keyspace and returns its reply as a Lua value. An error reply raises a
// Lua error (a table with an err field), or, protected, is returned as
// that table.
func (e *engine) call(L *lua.LState, protected bool) int {
	top := L.GetTop()
	if top == 0 {
		L.RaiseError("Please specify at least one argument for this redis lib call")
	}
	argv := make([]string, top)
	for i := 1; i <= top; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			argv[i-1] = string(v)
		case lua.LNumber:
			argv[i-1] = formatNumber(float64(v))
		default:
			return e.fail(L, Error("ERR Lua redis lib command arguments must be strings or integers"), protected)
		}
	}
	if _, ok := commands[strings.ToUpper(argv[0])]; !ok {
		return e.fail(L, Error("ERR Unknown Redis command called from script"), protected)
	}
	r := e.node.command(argv)
	if err, ok := r.(Error); ok {
		return e.fail(L, err, protected)
	}
	L.Push(toLua(L, r))
	return 1
}

// fail returns err to the script as redis.pcall does, or raises it as
// redis.call does.
func (e *engine) fail(L *lua.LState, err Error, protected bool) int {
	t := L.NewTable()
	L.SetField(t, "err", lua.LString(string(err)))
	if protected {
		L.Push(t)
		return 1
	}
	L.Error(t, 1)
	return 0
}

// formatNumber is how Redis passes a Lua number to a command: the shortest
// form that reads back the same, whole numbers without an exponent.
func formatNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e17 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// toLua converts a command's reply for a script: integer → number, bulk
// string → string, nil → false, array → table, status → {ok = …}.
func toLua(L *lua.LState, r reply) lua.LValue {
	switch r := r.(type) {
	case int64:
		return lua.LNumber(r)
	case string:
		return lua.LString(r)
	case Status:
		t := L.NewTable()
		L.SetField(t, "ok", lua.LString(string(r)))
		return t
	case []any:
		t := L.CreateTable(len(r), 0)
		for _, x := range r {
			t.Append(toLua(L, x))
		}
		return t
	}
	return lua.LFalse
}

// fromLua converts what a script returns to its reply: number → integer
// (truncated), string → bulk string, true → 1, false and nil → nil, a
// table with err → an error reply, with ok → a status, any other table →
// an array of its elements 1, 2, … up to the first nil.
func fromLua(v lua.LValue) reply {
	switch v := v.(type) {
	case lua.LNumber:
		return int64(v)
	case lua.LString:
		return string(v)
	case lua.LBool:
		if v {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if msg, ok := v.RawGetString("err").(lua.LString); ok {
			return Error(string(msg))
		}
		if msg, ok := v.RawGetString("ok").(lua.LString); ok {
			return string(msg)
		}
		var out []any
		for i := 1; ; i++ {
			x := v.RawGetInt(i)
			if x == lua.LNil {
				break
			}
			out = append(out, fromLua(x))
		}
		if out == nil {
			out = []any{}
		}
		return out
	}
	return nil
}
