package wire

import "strings"

// Detail is the part of a Result that few replies carry (Result.Detail).
type Detail struct {
	// Key, StatusHeld from a multi-key acquire: the index in the op's Keys
	// of the key another token holds (the first so held); 0 otherwise.
	Key int32
	// Inspect: the live places in the key's queue; how many of the first
	// 64 of those are readers'; the live readers of a read-write lock.
	Waiting, WaitingReaders, Readers int32
	// Waits, from a set's look at its queues: bit i is set where the
	// set waits for the op's Keys[i]: held, or another waiter first.
	Waits uint64
	// Holders, from a set's look at its queues: the token that holds each
	// of the op's Keys, "" where none does, each followed by a NUL (see
	// KeyHolder).
	Holders string
	// Granted and First, from a set's look at its queues: bit i is set
	// where the op's Keys[i] is granted to the set's place (Granted), or
	// the set is first in Keys[i]'s queue (First).
	Granted, First uint64
}

// Details returns r's Detail, the zero Detail where it has none.
func (r Result) Details() Detail {
	if r.Detail == nil {
		return Detail{}
	}
	return *r.Detail
}

// KeyHolder returns the token that holds the op's Keys[i] in r.Holders,
// "" where none does or the reply named none.
func (r Result) KeyHolder(i int) string {
	s := r.Details().Holders
	for ; i > 0; i-- {
		j := strings.IndexByte(s, 0)
		if j < 0 {
			return ""
		}
		s = s[j+1:]
	}
	tok, _, _ := strings.Cut(s, "\x00")
	return tok
}
