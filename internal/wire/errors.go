package wire

import (
	"errors"

	"github.com/redis/go-redis/v9"
)

// IsNoScript reports whether a node answered NOSCRIPT: it does not have the
// script cached (after SCRIPT FLUSH, say), and did not run it.
func IsNoScript(err error) bool {
	return err != nil && err != redis.Nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// IsReply reports whether err is the node's answer (an error reply), as
// opposed to a failure of the connection, after which the connection is
// not trusted further.
func IsReply(err error) bool {
	if err == redis.Nil { // a plain acquire's refusal: spares errors.As its allocation
		return true
	}
	var re redis.Error
	return errors.As(err, &re)
}

func IsAcquire(k Kind) bool { return k == OpAcquire || k == OpAcquireFenced || IsPlain(k) }

// TellsRunID reports whether o's result carries the node's run_id (the
// restart guard's): an acquire's, and the look of a waiter that a release
// may let in or grant the key, whose Client counts such admissions only
// from a node it has heard the run_id of since the subscription that
// brought them was last confirmed.
func TellsRunID(o *Op) bool { return IsAcquire(o.Kind) || o.Kind == OpQueue && o.Seq > 0 }
