package redlock

import (
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// The in-memory node (internal/memnode) runs the production scripts; this
// file proves it answers as redis-server does. One table of operation
// sequences, built with the library's own ops and encoding (every script,
// every reply branch, errors included), runs against both, and every reply
// and every message published must agree. Durations (PTTLs, leases) may
// differ by the milliseconds between the two runs of a step.

// step is one command of a sequence: a script op (sent as EVAL of its
// source, as a stream does after NOSCRIPT) or a raw command.
type step struct {
	o    *wire.Op
	node int // the node index the op is encoded for (a fenced acquire's residue)
	raw  []any
}

func (w step) args() []any {
	if w.o == nil {
		return w.raw
	}
	w.o.Encode()
	if w.o.Kind == wire.OpAcquirePlain {
		return w.o.Args(w.node) // a command, not a script
	}
	return w.o.EvalArgs(w.node)
}

func (w step) String() string {
	if w.o == nil {
		return fmt.Sprint(w.raw...)
	}
	return fmt.Sprintf("op kind %d (keys %v, mode %d)", w.o.Kind, w.o.Keys, w.o.Mode)
}

func raw(args ...any) step { return step{raw: args} }

func do(o *wire.Op) step { return step{o: o} }

// confKey is a sequence's lock key, with its queue, lease, readers and
// fence keys beside it.
func confKey(name string) string { return "redlock:{conf:" + name + "}" }

const wakePrefix = "redlock:wake:"

func withPlace(o *wire.Op, id string, ticket int64, lease time.Duration) *wire.Op {
	o.Place = &wire.Place{ID: id, Ticket: ticket, Lease: lease}
	return o
}

func withWake(o *wire.Op) *wire.Op { return withWakeOf(o, wakePrefix) }

// withWakeOf sets the op's wake prefix; one other than its key's prefix's
// keeps a release in its full form (Op.release).
func withWakeOf(o *wire.Op, prefix string) *wire.Op { o.Wake = prefix; return o }

func withKeys(o *wire.Op, keys ...string) *wire.Op { o.Keys, o.Mode = keys, wire.ModeSet; return o }

func withMode(o *wire.Op, m wire.Mode) *wire.Op { o.Mode = m; return o }

func withFence(o *wire.Op, f int64) *wire.Op { o.Fence = f; return o }

// conformance is the table: sequences of commands, each sequence on keys of
// its own.
func conformance() map[string][]step {
	const ttl, lease = 10 * time.Second, 5 * time.Second
	k := confKey
	acq := func(key, token string) *wire.Op { return wire.NewOp(wire.OpAcquire, key, token, token, ttl) }
	rel := func(key, token string, cooldown time.Duration) *wire.Op {
		return withWake(wire.NewOp(wire.OpRelease, key, token, "", cooldown))
	}
	queue := func(key, id string, ticket int64, quiet bool) *wire.Op {
		o := withWake(withPlace(&wire.Op{Kind: wire.OpQueue, Key: key}, id, ticket, lease))
		o.Quiet = quiet
		return o
	}
	fenced := func(key, token string, proposal int64, node int) step {
		return step{o: withFence(wire.NewOp(wire.OpAcquireFenced, key, token, token, ttl), proposal), node: node}
	}
	plain := func(key, token, value string) *wire.Op {
		return wire.NewOp(wire.OpAcquirePlain, key, token, value, ttl)
	}
	inspect := func(key string) step { return do(wire.NewOp(wire.OpInspect, key, "", "", 0)) }
	look := func(key, id string, ticket, seq int64) *wire.Op { // a look that numbers itself
		o := queue(key, id, ticket, false)
		o.Seq = seq
		return o
	}
	rq := func(key, id string, ticket int64, quiet bool) *wire.Op {
		return withMode(queue(key, id, ticket, quiet), wire.ModeRead)
	}
	setQueue := func(k1, k2, id string, ticket int64, quiet bool) *wire.Op {
		return withKeys(queue(k1, id, ticket, quiet), k1, k2)
	}
	setAcq := func(k1, k2, token, id string, ticket int64) *wire.Op {
		o := withKeys(acq(k1, token), k1, k2)
		if id != "" {
			o = withPlace(o, id, ticket, lease)
		}
		return o
	}
	setAcqOp := func(k1, k2, token, id string, ticket int64) *wire.Op { return setAcq(k1, k2, token, id, ticket) }
	const p = 1150000000000063 // a proposal: ≡ 63 (mod 64), as a Client's
	m1, m2, m3 := k("m")+"a", k("m")+"b", k("m")+"c"
	return map[string][]step{
		"acquire": {
			do(acq(k("a"), "t1")), do(acq(k("a"), "t1")), do(acq(k("a"), "t2")),
			do(wire.NewOp(wire.OpAcquire, k("a"), "t1", "t1\x00meta", ttl)), do(wire.NewOp(wire.OpInspect, k("a"), "", "", 0)),
			raw("SET", k("b"), "other"), do(acq(k("b"), "t1")),
			raw("ZADD", k("c"), 1, "x"), do(acq(k("c"), "t1")),
			raw("EVALSHA", strings.Repeat("0", 40), 0),                                           // NOSCRIPT
			raw("EVALSHA", (&wire.Op{Kind: wire.OpAcquire}).SHA(), 1, k("d"), "t1", "t1", 10000), // cached by the EVALs before
		},
		"own places ahead": { // a look's fifth reply: only the waiter's own Client's places ahead of it
			do(queue(k("o"), "c1.1", 100, false)), do(queue(k("o"), "c1.2", 200, false)), // c1.2: c1.1 ahead, 1
			do(queue(k("o"), "c2.1", 150, false)), do(queue(k("o"), "c1.2", 200, false)), // c2.1 ahead of c1.2 now: 0
			do(queue(k("o"), "c2.1", 150, true)), do(queue(k("o"), "c1.1", 100, false)), // c1.1 first: 1
		},
		"gate by ticket": { // a place a node lost, ties by ID, a refused waiter put back
			do(queue(k("g"), "b.1", 200, false)),
			do(withPlace(acq(k("g"), "ta"), "a.1", 100, lease)), raw("ZRANGE", k("g")+":queue", 0, -1),
			do(rel(k("g"), "ta", 0)), do(withPlace(acq(k("g"), "tc"), "c.1", 300, lease)),
			do(withPlace(acq(k("g"), "t0"), "a0.1", 200, lease)), do(rel(k("g"), "t0", 0)),
			do(withPlace(acq(k("g"), "t9"), "z9.1", 200, lease)), raw("ZRANGE", k("g")+":queue", 0, -1),
			do(withPlace(acq(k("g"), "tb"), "b.1", 200, lease)), raw("ZRANGE", k("g")+":queue", 0, -1),
			do(withMode(queue(k("gr"), "w.1", 200, false), wire.ModeWrite)),
			do(withMode(withPlace(acq(k("gr"), "r1"), "a.r1", 100, lease), wire.ModeRead)),
			do(withMode(withPlace(acq(k("gr"), "r2"), "b.r2", 300, lease), wire.ModeRead)), raw("ZRANGE", k("gr")+":queue", 0, -1),
			do(queue(k("gs")+"a", "b.1", 200, false)), do(setAcqOp(k("gs")+"a", k("gs")+"b", "s1", "a.1", 100)),
			do(setAcqOp(k("gs")+"a", k("gs")+"b", "s3", "c.1", 300)),
			raw("ZRANGE", k("gs")+"a:queue", 0, -1), raw("ZRANGE", k("gs")+"b:queue", 0, -1),
		},
		"release forms": { // the short form (token alone, Op.release) and the full one, each on a free key and over a queue
			do(plain(k("rf"), "t1", "t1")), do(rel(k("rf"), "t1", 0)), raw("EXISTS", k("rf")), // short: deleted
			do(plain(k("rf"), "t2", "t2")), do(queue(k("rf"), "c1.1", 100, false)), do(rel(k("rf"), "t2", 0)), raw("GET", k("rf")), // short: wakes c1.1 on redlock:wake:c1
			do(withPlace(acq(k("rf"), "t3"), "c1.1", 100, lease)), do(queue(k("rf"), "c2.1", 200, false)),
			do(withWakeOf(rel(k("rf"), "t3", 0), "other:wake:")), raw("GET", k("rf")), // full: wakes c2.1 on other:wake:c2
			do(plain(k("rg"), "t4", "t4")), do(withWakeOf(rel(k("rg"), "t4", 0), "other:wake:")), raw("EXISTS", k("rg")), // full, free: deleted
		},
		"plain acquire and reservations": {
			do(plain(k("p"), "t1", "t1\x00meta")), raw("PTTL", k("p")), do(plain(k("p"), "t2", "t2")), // created (OK); refused (nil)
			raw("ZADD", k("pz"), 1, "x"), do(plain(k("pz"), "t1", "t1")), // WRONGTYPE
			do(queue(k("p"), "c1.1", 100, false)), do(rel(k("p"), "t1", 0)), // wakes c1.1 and reserves the key
			raw("GET", k("p")), raw("PTTL", k("p")), inspect(k("p")),
			do(plain(k("p"), "t3", "t3")), do(acq(k("p"), "t3")), // refused: by the reservation, by the queue
			do(wire.NewOp(wire.OpExtend, k("p"), "t1", "", ttl)), do(rel(k("p"), "t1", 0)), // absent, not another's
			do(withFence(wire.NewOp(wire.OpProclaim, k("p"), "t1", "t1\x00v", 0), 7)),
			do(queue(k("p"), "c2.1", 200, false)), raw("PTTL", k("p")), // a look renews it for the head's lease
			do(withPlace(acq(k("p"), "t4"), "c1.1", 100, lease)), raw("GET", k("p")), // the head takes it
			do(rel(k("p"), "t4", 0)), raw("GET", k("p")), // reserved for c2.1
			do(queue(k("p"), "c2.1", 200, true)), raw("EXISTS", k("p")), // the last place leaves: deleted
			do(plain(k("pq"), "t7", "t7")), do(queue(k("pq"), "c3.1", 300, false)), do(rel(k("pq"), "t7", 0)), // reserved for c3.1
			do(withPlace(&wire.Op{Kind: wire.OpQueue, Key: k("pq"), Wake: wakePrefix}, "c4.1", 400, 2*lease)), raw("PTTL", k("pq")), // and for a look's own lease
			do(queue(k("pl"), "c1.1", 100, false)), raw("GET", k("pl")), // a look finds it free: reserved
			do(withMode(acq(k("pl"), "r1"), wire.ModeRead)), fenced(k("pl"), "t5", p, 0), // both refused by the queue
			do(withKeys(acq(k("pl"), "t6"), k("pl"))), raw("GET", k("pl")), // a set is refused by the queue too
			do(withKeys(rel(k("pl"), "t6", 0), k("pl"))), raw("GET", k("pl")), // not its: absent, still reserved
			do(wire.NewFenceWrite(k("pl"), nil, "t6", p)),
			do(withPlace(withMode(acq(k("pl"), "w1"), wire.ModeWrite), "c1.1", 100, lease)),
			do(withMode(rel(k("pl"), "w1", 0), wire.ModeWrite)), raw("EXISTS", k("pl")), // no queue left: deleted
		},
		"extend and release": {
			do(wire.NewOp(wire.OpExtend, k("e"), "t1", "", ttl)), do(acq(k("e"), "t1")),
			do(wire.NewOp(wire.OpExtend, k("e"), "t1", "", 2*ttl)), raw("PTTL", k("e")), do(wire.NewOp(wire.OpExtend, k("e"), "t2", "", ttl)),
			do(rel(k("e"), "t2", 0)), do(rel(k("e"), "t1", 0)), do(rel(k("e"), "t1", 0)),
			do(acq(k("e"), "t1")), do(rel(k("e"), "t1", 3*time.Second)), raw("PTTL", k("e")), do(acq(k("e"), "t2")),
			do(wire.NewOp(wire.OpRelease, k("e"), "t1", "", 0)), // no wake prefix
		},
		"queue": {
			do(queue(k("q"), "c1.1", 100, false)), do(queue(k("q"), "c2.1", 200, false)),
			do(acq(k("q"), "t9")),                                // not queued: the queue's refusal
			do(withPlace(acq(k("q"), "t2"), "c2.1", 200, lease)), // queued, not first
			do(withPlace(acq(k("q"), "t1"), "c1.1", 100, lease)), // first: granted, leaves the queue
			do(queue(k("q"), "c2.1", 200, false)), do(wire.NewOp(wire.OpInspect, k("q"), "", "", 0)),
			do(rel(k("q"), "t1", 0)), raw("GET", k("q")), // wakes c2.1; reserved since t1
			do(queue(k("q"), "c3.1", 300, false)), do(queue(k("q"), "c2.1", 200, true)), // c2 leaves first: wakes c3, for c2.1 and for t1
			raw("GET", k("q")),
			do(wire.NewOp(wire.OpInspect, k("q"), "", "", 0)), raw("ZRANGE", k("q")+":queue", 0, -1),
			do(withPlace(acq(k("q"), "t3"), "c3.1", 300, lease)), do(withPlace(acq(k("q"), "t4"), "c4.1", 400, lease)),
			do(queue(k("q"), "c4.1", 400, false)),
		},
		"fencing": {
			fenced(k("f"), "t1", p, 0), do(rel(k("f"), "t1", 0)), raw("ZSCORE", k("f")+":fence", "c"),
			fenced(k("f"), "t2", p, 3), fenced(k("f"), "t2", p+64, 3), fenced(k("f"), "t3", p, 1),
			do(wire.NewFenceWrite(k("f"), nil, "t3", p+1000)), do(wire.NewFenceWrite(k("f"), nil, "t2", p+2000)),
			do(wire.NewFenceWrite(k("f"), nil, "t2", 5)), do(rel(k("f"), "t2", 0)), do(wire.NewFenceWrite(k("f"), nil, "t9", p+3000)),
			do(wire.NewOp(wire.OpInspect, k("f"), "", "", 0)),
			raw("SET", k("g")+":fence", "hello"), fenced(k("g"), "t1", p, 0),
			raw("SET", k("h")+":fence", fmt.Sprint(wire.MaxFence-2)), fenced(k("h"), "t1", 0, 0),
			// The uncontended fenced grant as two plain commands
			// (wire.OpAcquireFencedPlain): SET NX, then ZADD GT CH of the
			// proposal. Taken (1); the counter ahead (0: the script follows,
			// as re-entry); a held key (nil, and the counter raised all the
			// same); an older Client's string counter (WRONGTYPE: the script
			// follows, and rewrites it as the sorted set).
			raw("SET", k("i"), "t1", "NX", "PX", 10000), raw("ZADD", k("i")+":fence", "GT", "CH", p, "c"),
			raw("SET", k("i"), "t2", "NX", "PX", 10000), raw("ZADD", k("i")+":fence", "GT", "CH", p+64, "c"), raw("ZSCORE", k("i")+":fence", "c"),
			do(wire.NewFenceWrite(k("i"), nil, "t1", p+10)), raw("ZSCORE", k("i")+":fence", "c"), // ours: acknowledged, the counter left above t
			do(rel(k("i"), "t1", 0)), do(wire.NewFenceWrite(k("i"), nil, "t1", p+10)), // not ours, counter above t: refused
			raw("SET", k("i"), "t3", "NX", "PX", 10000), raw("ZADD", k("i")+":fence", "GT", "CH", p, "c"), fenced(k("i"), "t3", p, 1),
			raw("ZSCORE", k("i")+":fence", "c"),
			raw("SET", k("j")+":fence", fmt.Sprint(p+6400)), raw("SET", k("j"), "t1", "NX", "PX", 10000),
			raw("ZADD", k("j")+":fence", "GT", "CH", p, "c"), fenced(k("j"), "t1", p, 2), raw("GET", k("j")+":fence"), raw("ZSCORE", k("j")+":fence", "c"),
			raw("ZADD", k("j2")+":fence", 1, "x"), fenced(k("j2"), "t1", p, 0), raw("ZSCORE", k("j2")+":fence", "c"), raw("ZSCORE", k("j2")+":fence", "x"),
			// A semaphore's sweep sends an empty place: the script reads the
			// queue, refused, the key reserved.
			do(queue(k("m"), "c1.1", 100, false)), raw("DEL", k("m")),
			step{o: withPlace(withFence(wire.NewOp(wire.OpAcquireFenced, k("m"), "t2", "t2", ttl), p+64), "", 0, 0), node: 2}, raw("GET", k("m")),
		},
		// A fenced waiter granted the key by a release: with the release's
		// proposal, above the counter; at the counter, without a token, and
		// the waiter's fenced attempt takes the key from its place.
		"fenced grant by release": {
			fenced(k("fg"), "t1", p, 0), do(look(k("fg"), "c1.wif1", 100, 7)), do(look(k("fg"), "c2.wif1", 200, 3)),
			do(withFence(rel(k("fg"), "t1", 0), p+64)), raw("GET", k("fg")), raw("ZSCORE", k("fg")+":fence", "c"),
			do(withFence(rel(k("fg"), "c1.wif1", 0), p+64)), raw("GET", k("fg")), raw("ZSCORE", k("fg")+":fence", "c"),
			step{o: withPlace(withFence(wire.NewOp(wire.OpAcquireFenced, k("fg"), "t3", "t3", ttl), p), "c2.wif1", 200, lease), node: 1},
			raw("GET", k("fg")), raw("ZSCORE", k("fg")+":fence", "c"),
		},
		// An election's grant announces the node's counter as the term (the
		// proposal taken; a counter ahead; a value in another form, kept),
		// and publishes it; a refusal publishes nothing.
		"election grant": {
			step{o: withMode(withFence(wire.NewOp(wire.OpAcquireFenced, k("e"), "t1", "t1\x000.0 v", ttl), p), wire.ModeElection), node: 2},
			raw("GET", k("e")), raw("ZSCORE", k("e")+":fence", "c"),
			step{o: withMode(withFence(wire.NewOp(wire.OpAcquireFenced, k("e"), "t2", "t2\x000.0 w", ttl), p+64), wire.ModeElection), node: 1},
			raw("SET", k("e2")+":fence", fmt.Sprint(p+6400)),
			step{o: withMode(withFence(wire.NewOp(wire.OpAcquireFenced, k("e2"), "t1", "t1\x000.0 v", ttl), p), wire.ModeElection), node: 3},
			raw("GET", k("e2")),
			step{o: withMode(withFence(wire.NewOp(wire.OpAcquireFenced, k("e3"), "t1", "t1\x00other", ttl), p), wire.ModeElection), node: 0},
			raw("GET", k("e3")),
		},
		"proclaim": {
			do(withFence(wire.NewOp(wire.OpProclaim, k("l"), "t1", "t1\x00v", 0), 7)), do(acq(k("l"), "t1")),
			do(withFence(wire.NewOp(wire.OpProclaim, k("l"), "t1", "t1\x001.1 v", 0), 7)), raw("GET", k("l")),
			do(withFence(wire.NewOp(wire.OpProclaim, k("l"), "t2", "t2\x00x", 0), 8)),
		},
		"multi-key": {
			do(withKeys(acq(m1, "t1"), m1, m2)), do(withKeys(acq(m1, "t1"), m1, m2)),
			do(withKeys(acq(m2, "t2"), m2, m3)), do(withKeys(wire.NewOp(wire.OpExtend, m1, "t1", "", 2*ttl), m1, m2)),
			do(withKeys(wire.NewOp(wire.OpExtend, m2, "t2", "", ttl), m2, m3)),
			step{o: withKeys(withFence(wire.NewOp(wire.OpAcquireFenced, m3, "t3", "t3", ttl), p), m3, m3+"x"), node: 2},
			do(withKeys(wire.NewFenceWrite(m3, nil, "t3", p+640), m3, m3+"x")), raw("ZSCORE", m3+"x:fence", "c"),
			do(withKeys(rel(m1, "t1", 0), m1, m2)), do(withKeys(rel(m1, "t1", 0), m1, m2)),
			raw("SET", m1, "t9"), do(withKeys(rel(m3, "t3", 0), m1, m3, m3+"x")),
		},
		"multi-key and queues": {
			do(queue(m1+"q", "c1.1", 100, false)), do(withKeys(acq(m1+"q", "t1"), m1+"q", m2+"q")), // refused: c1.1 waits first
			do(queue(m2+"q", "c2.1", 200, false)), do(withKeys(acq(m2+"q", "t2"), m2+"q", m3+"q")),
			do(withKeys(wire.NewOp(wire.OpExtend, m1+"q", "t1", "", ttl), m1+"q", m2+"q", m3+"q")), // a key absent
			do(withKeys(rel(m1+"q", "t1", 0), m1+"q", m2+"q")),                                     // not its: absent
			do(withKeys(withFence(wire.NewOp(wire.OpAcquireFenced, m1+"q", "t3", "t3", ttl), p), m1+"q", m2+"q")),
			raw("SET", m3+"f:fence", "x"),
			step{o: withKeys(withFence(wire.NewOp(wire.OpAcquireFenced, m3+"f", "t4", "t4", ttl), p), m3+"f", m3+"g"), node: 1},
		},
		"multi-key queued": {
			do(queue(m1+"w", "c1.1", 100, false)),            // a one-key waiter, first on m1w
			do(setQueue(m1+"w", m2+"w", "s2.1", 200, false)), // a set joins both queues: first on m2w only
			do(setAcq(m1+"w", m2+"w", "t2", "s2.1", 200)),    // refused by c1.1; both keys kept reserved
			raw("GET", m1+"w"), raw("PTTL", m2+"w"),
			do(withPlace(acq(m1+"w", "t1"), "c1.1", 100, lease)), // c1.1 takes m1w
			do(setAcq(m1+"w", m2+"w", "t2", "s2.1", 200)),        // refused: m1w held; its places refreshed
			do(rel(m1+"w", "t1", 0)),                             // wakes s2.1, now first on m1w
			do(setQueue(m1+"w", m2+"w", "s2.1", 200, false)),     // first on both, both free
			do(setAcq(m1+"w", m2+"w", "t2", "s2.1", 200)),        // granted: out of both queues
			raw("EXISTS", m1+"w:queue", m2+"w:queue"),
			do(setQueue(m1+"w", m2+"w", "s3.1", 300, false)),                                  // another set: the keys are held, by t2
			raw("SET", m3+"w", "t8\x00meta"), do(setQueue(m3+"z", m3+"w", "s6.1", 600, true)), // the first key held names its holder
			raw("DEL", m3+"w"),
			raw("SET", m3+"h1", "t7"), raw("SET", m3+"h2", "t8\x00meta"), // each key's holder named: none, t7, t8
			do(withKeys(queue(m3+"h0", "s7.1", 700, false), m3+"h0", m3+"h1", m3+"h2")),
			do(withKeys(queue(m3+"h0", "s7.1", 700, true), m3+"h0", m3+"h1", m3+"h2")),
			do(setAcq(m1+"w", m2+"w", "t3", "", 0)),            // unqueued: refused by the holder
			do(withKeys(rel(m1+"w", "t2", 0), m1+"w", m2+"w")), // wakes s3.1 on each key, reserves both
			raw("GET", m2+"w"),
			do(queue(m2+"w", "c4.1", 400, false)),           // behind s3.1
			do(setQueue(m1+"w", m2+"w", "s3.1", 300, true)), // s3.1 leaves: m1w deleted, m2w's new first woken
			raw("EXISTS", m1+"w"), raw("GET", m2+"w"),
			do(setQueue(m1+"w", m2+"w", "s5.1", 500, false)), // behind c4.1 on m2w
			step{o: withPlace(withKeys(withFence(wire.NewOp(wire.OpAcquireFenced, m1+"w", "t5", "t5", ttl), p), m1+"w", m2+"w"), "s5.1", 500, lease), node: 2},
			do(queue(m2+"w", "c4.1", 400, true)), // wakes s5.1
			step{o: withPlace(withKeys(withFence(wire.NewOp(wire.OpAcquireFenced, m1+"w", "t5", "t5", ttl), p), m1+"w", m2+"w"), "s5.1", 500, lease), node: 2},
			raw("ZSCORE", m2+"w:fence", "c"), do(withKeys(setAcqOp(m1+"w", m2+"w", "t5", "s5.1", 500), m1+"w", m2+"w")), // re-entry
		},
		"read-write queued": {
			do(withMode(acq(k("rq"), "w1"), wire.ModeWrite)),                           // a writer holds
			do(rq(k("rq"), "c1.r1", 100, false)), do(rq(k("rq"), "c2.r2", 200, false)), // readers wait: first
			do(queue(k("rq"), "c3.3", 300, false)), do(rq(k("rq"), "c4.r4", 400, false)), // a writer, a reader behind it
			do(withPlace(withMode(acq(k("rq"), "r1"), wire.ModeRead), "c1.r1", 100, lease)), // refused: the writer holds
			do(withMode(acq(k("rq"), "r9"), wire.ModeRead)),                                 // not queued: refused
			do(withMode(rel(k("rq"), "w1", 0), wire.ModeWrite)),                             // wakes c1.r1 and c2.r2, not c4.r4
			do(withMode(acq(k("rq"), "r8"), wire.ModeRead)),                                 // not queued, a writer waits: refused
			do(withPlace(withMode(acq(k("rq"), "r4"), wire.ModeRead), "c4.r4", 400, lease)), // behind the writer: refused
			do(withPlace(withMode(acq(k("rq"), "r2"), wire.ModeRead), "c2.r2", 200, lease)), // enters
			do(withPlace(withMode(acq(k("rq"), "r1"), wire.ModeRead), "c1.r1", 100, lease)), // enters
			do(withPlace(withMode(acq(k("rq"), "w3"), wire.ModeWrite), "c3.3", 300, lease)), // first, readers hold: refused
			do(rq(k("rq"), "c4.r4", 400, false)), inspect(k("rq")),
			do(withMode(rel(k("rq"), "r1", 0), wire.ModeRead)), do(withMode(rel(k("rq"), "r2", 0), wire.ModeRead)), // the last wakes c3.3
			do(withPlace(withMode(acq(k("rq"), "w3"), wire.ModeWrite), "c3.3", 300, lease)),
			do(withMode(rel(k("rq"), "w3", 0), wire.ModeWrite)), raw("GET", k("rq")), // wakes c4.r4: reserved
			do(rq(k("rq"), "c5.5", 500, false)), do(rq(k("rq"), "c4.r4", 400, true)), // c4.r4 leaves first: wakes c5.5
			raw("GET", k("rq")), do(queue(k("rq"), "c5.5", 500, true)), raw("EXISTS", k("rq")),
			do(rq(k("rq"), "c6.r6", 600, false)), do(withPlace(withMode(acq(k("rq"), "r6"), wire.ModeRead), "c6.r6", 600, lease)),
			raw("EXISTS", k("rq")), // the reservation gone with its queue
		},
		"read-write": {
			do(withMode(acq(k("rw"), "r1"), wire.ModeRead)), do(withMode(acq(k("rw"), "r1"), wire.ModeRead)),
			do(withMode(acq(k("rw"), "r2"), wire.ModeRead)), do(withMode(acq(k("rw"), "w1"), wire.ModeWrite)),
			do(withPlace(withMode(acq(k("rw"), "w1"), wire.ModeWrite), "cw.1", 100, lease)),
			do(withMode(acq(k("rw"), "r3"), wire.ModeRead)), // a writer waits first: refused
			do(queue(k("rw"), "cw.1", 100, false)), do(wire.NewOp(wire.OpInspect, k("rw"), "", "", 0)),
			do(withMode(wire.NewOp(wire.OpExtend, k("rw"), "r1", "", 2*ttl), wire.ModeRead)),
			do(withMode(wire.NewOp(wire.OpExtend, k("rw"), "r9", "", ttl), wire.ModeRead)),
			do(withMode(rel(k("rw"), "r1", 0), wire.ModeRead)), do(withMode(rel(k("rw"), "r2", 0), wire.ModeRead)), // the last wakes cw
			do(withMode(rel(k("rw"), "r2", 0), wire.ModeRead)),
			do(withPlace(withMode(acq(k("rw"), "w1"), wire.ModeWrite), "cw.1", 100, lease)),
			do(withMode(acq(k("rw"), "r4"), wire.ModeRead)), // the writer holds
			do(withMode(rel(k("rw"), "w1", 0), wire.ModeWrite)),
			do(withMode(acq(k("rw"), "r5"), wire.ModeRead)), do(withMode(rel(k("rw"), "r5", 2*time.Second), wire.ModeRead)),
			do(withMode(wireOp(fenced(k("rw"), "w2", p, 0)), wire.ModeWrite)),
		},
	}
}

func wireOp(w step) *wire.Op { return w.o }
