package redlock

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is the wire protocol with one node. Every operation is one Lua
// script, so each is atomic on the node and costs one round trip. Scripts run
// through go-redis's Script.Run: EVALSHA, falling back to EVAL (which also
// loads the script) when the node answers NOSCRIPT, e.g. after SCRIPT FLUSH
// or a restart.
//
// A lock is one string key. Its value is the holder's token, followed by a
// NUL byte and the holder's metadata when there is any, so ownership is "the
// value is the token, or starts with token+NUL". Tokens never contain NUL.
//
// Only GET, SET, PTTL, PEXPIRE and DEL touch the key: a key of another type
// makes GET fail with WRONGTYPE, the script stops, and the foreign key is
// left as it was.

// acquireScript takes the lock or re-enters it.
// KEYS[1] key, ARGV[1] token, ARGV[2] value, ARGV[3] ttl in ms.
// Reply: 1 created; 2 we held it already (re-entry), value and TTL refreshed;
// ≤ 0 refused, where the reply is −(holder's PTTL + 1): 0 means the holder's
// key has no TTL, −1 a PTTL of 0 ms, −101 a PTTL of 100 ms.
var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
if v == ARGV[1] or string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. '\0' then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 2
end
return -1 - redis.call('PTTL', KEYS[1])
`)

// extendScript resets the TTL of a key we hold; it never re-creates one.
// KEYS[1] key, ARGV[1] token, ARGV[2] ttl in ms.
// Reply: 1 extended; 0 key absent (expired); −1 another token holds it.
var extendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// releaseScript deletes a key we hold, or with a cooldown leaves it in place
// to expire cooldown ms from now, keeping other tokens out until then.
// KEYS[1] key, ARGV[1] token, ARGV[2] cooldown in ms (0: delete now).
// Reply: 1 released; 0 key absent (expired); −1 another token holds it.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
if v ~= ARGV[1] and string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. '\0' then return -1 end
if ARGV[2] == '0' then
	redis.call('DEL', KEYS[1])
else
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
`)

// inspectScript reads the key's value and PTTL in one atomic step.
// Reply: {value or nil, PTTL}.
var inspectScript = redis.NewScript(`
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
`)

// status is one node's answer to one operation.
type status int8

const (
	statusFailed    status = iota // the node failed or did not answer; see result.err
	statusOK                      // acquire created the key; extend or release succeeded
	statusRefreshed               // acquire found our own token (re-entry) and refreshed it
	statusHeld                    // another token holds the key
	statusAbsent                  // extend or release found no key: it had expired
)

// result is one node's outcome.
type result struct {
	status status
	pttl   time.Duration // statusHeld from acquire or inspect: holder's remaining TTL, −1 if none
	value  string        // statusHeld from inspect: the key's value
	err    error         // statusFailed only
}

func (r result) ok() bool { return r.status == statusOK || r.status == statusRefreshed }

// node is everything the library asks of one Redis master.
type node interface {
	acquire(ctx context.Context, key, token, value string, ttl time.Duration) result
	extend(ctx context.Context, key, token string, ttl time.Duration) result
	release(ctx context.Context, key, token string, cooldown time.Duration) result
	inspect(ctx context.Context, key string) result
	name() string
}

// redisNode is a node behind a go-redis client: standalone, Sentinel
// failover or Cluster.
type redisNode struct {
	client redis.UniversalClient
	addr   string
}

var _ node = (*redisNode)(nil)

func (n *redisNode) name() string { return n.addr }

func (n *redisNode) acquire(ctx context.Context, key, token, value string, ttl time.Duration) result {
	r, err := acquireScript.Run(ctx, n.client, []string{key}, token, value, ttl.Milliseconds()).Int64()
	switch {
	case err != nil:
		return result{err: err}
	case r == 1:
		return result{status: statusOK}
	case r == 2:
		return result{status: statusRefreshed}
	case r <= 0:
		return result{status: statusHeld, pttl: time.Duration(-r-1) * time.Millisecond}
	}
	return result{err: fmt.Errorf("unexpected acquire reply %d", r)}
}

func (n *redisNode) extend(ctx context.Context, key, token string, ttl time.Duration) result {
	return ownerReply(extendScript.Run(ctx, n.client, []string{key}, token, ttl.Milliseconds()).Int64())
}

func (n *redisNode) release(ctx context.Context, key, token string, cooldown time.Duration) result {
	return ownerReply(releaseScript.Run(ctx, n.client, []string{key}, token, cooldown.Milliseconds()).Int64())
}

// ownerReply decodes the 1 / 0 / −1 replies of extend and release.
func ownerReply(r int64, err error) result {
	switch {
	case err != nil:
		return result{err: err}
	case r == 1:
		return result{status: statusOK}
	case r == 0:
		return result{status: statusAbsent}
	case r == -1:
		return result{status: statusHeld}
	}
	return result{err: fmt.Errorf("unexpected reply %d", r)}
}

func (n *redisNode) inspect(ctx context.Context, key string) result {
	reply, err := inspectScript.Run(ctx, n.client, []string{key}).Slice()
	if err != nil {
		return result{err: err}
	}
	if len(reply) != 2 {
		return result{err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	pttl, ok := reply[1].(int64)
	if !ok {
		return result{err: fmt.Errorf("unexpected inspect reply %v", reply)}
	}
	value, held := reply[0].(string)
	if !held {
		return result{status: statusAbsent}
	}
	if pttl < 0 {
		return result{status: statusHeld, pttl: -1, value: value}
	}
	return result{status: statusHeld, pttl: time.Duration(pttl) * time.Millisecond, value: value}
}

// encodeValue is the key's value for a holder: the token, then NUL and the
// metadata when there is any.
func encodeValue(token, metadata string) string {
	if metadata == "" {
		return token
	}
	return token + "\x00" + metadata
}
