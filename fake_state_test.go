package redlock

import (
	"fmt"
	"strings"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// What a test reads and writes on a fake node directly: keys, counters,
// queues and readers, set up before a schedule or checked after it.

func owns(value, token string) bool {
	return value == token || strings.HasPrefix(value, token+"\x00")
}

// set stores value at key with the given TTL (no TTL when ttl < 0; a TTL
// is kept in whole ms, rounded up, as Redis keeps it).
func (n *fakeNode) set(key, value string, ttl time.Duration) {
	if ttl < 0 {
		n.mem.Do("SET", key, value)
		return
	}
	n.mem.Do("SET", key, value, "PX", max((ttl+time.Millisecond-1).Milliseconds(), 1))
}

// value returns the string at key, if there is one.
func (n *fakeNode) value(key string) (string, bool) {
	v, ok := n.mem.Do("GET", key).(string)
	return v, ok
}

// counter returns the fence counter at key, as its scripts read it (a
// sorted set's score of "c", or a string counter from before), "" for none.
func (n *fakeNode) counter(key string) string {
	if v, ok := n.mem.Do("ZSCORE", key, "c").(string); ok {
		return v
	}
	v, _ := n.value(key)
	return v
}

// del deletes keys: a key lost, or a lease gone.
func (n *fakeNode) del(keys ...string) {
	args := []any{"DEL"}
	for _, k := range keys {
		args = append(args, k)
	}
	n.mem.Do(args...)
}

// enqueue puts p in the wait queue of key, as a waiter's look does.
func (n *fakeNode) enqueue(key string, p *wire.Place) {
	o := &wire.Op{Kind: wire.OpQueue, Key: key, Place: p}
	o.Encode()
	n.mem.Do(o.EvalArgs(n.index)...)
}

// setLease makes the place id in key's queue lapse d from now.
func (n *fakeNode) setLease(key, id string, d time.Duration) {
	n.mem.Do("ZADD", key+":lease", time.Now().Add(d).UnixMilli(), id)
}

// readers counts the live readers of the read-write lock at key.
func (n *fakeNode) readers(key string) int64 {
	c, _ := n.mem.Do("ZCOUNT", key+":readers", fmt.Sprintf("(%d", time.Now().UnixMilli()), "+inf").(int64)
	return c
}

func (n *fakeNode) releases() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.releaseErrs)
}
