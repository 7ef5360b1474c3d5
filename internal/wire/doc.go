// Package wire is what the library sends a Redis node and what it makes
// of the answers: every operation is one Lua script (so each is atomic on
// the node and costs one round trip), an Op's fields say what it asks,
// Op.Encode turns them into the script's KEYS and ARGV (the one encoder),
// and Decode turns each reply into a Result. It does no I/O: internal/nodeio
// sends the ops, and the in-memory test node (internal/memnode) runs the
// same scripts.
//
// The scripts are in one file per primitive: mutex.go (acquire, extend,
// release), queue.go (the wait queue every primitive shares), readers.go
// (a read-write lock's readers), multikey.go, fence.go (fencing tokens),
// election.go and inspect.go; scripts.go indexes them by op.
//
// A lock is one string key. Its value is the holder's token, followed by a
// NUL byte and the holder's metadata when there is any, so ownership is "the
// value is the token, or starts with token+NUL". Tokens never contain NUL.
//
// Only GET, SET, PTTL, PEXPIRE and DEL touch the key: a key of another type
// makes GET fail with WRONGTYPE, the script stops, and the foreign key is
// left as it was. Each script takes the lock key as KEYS[1].
package wire
