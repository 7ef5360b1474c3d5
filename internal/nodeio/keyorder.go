package nodeio

import (
	"slices"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// This file is the order a node's stream keeps (stream.go): which queued
// calls a lane takes, so that each key's calls run on the node in the
// order they were queued, though lanes run side by side.

// laneAfter is how long a far node's batches out must have been out
// before another lane sends, and the round trip from which a node is far
// (stream.far): longer than a loopback round trip takes, so that nodes
// nearby get one batch at a time, as large as the calls made meanwhile,
// and nodes far away a batch more after a millisecond rather than a round
// trip.
const laneAfter = time.Millisecond

// take returns lane l's next batch: every queued call when no other lane
// has a batch out, else, once the batches out have been out laneAfter, the
// calls that share no key with them nor with a call queued before them
// (see the top of this file); but none while the oldest batch out is past
// its calls' deadlines (a node that hangs gets no more calls than it has,
// and the calls queued meanwhile are dropped when their deadlines pass, as
// with one lane). With no batch, wait is how long until the
// batches out have been out laneAfter (0: nothing to wait for).
func (s *stream) take(l *lane) (batch []Call, wait time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil, 0
	}
	switch {
	case len(s.out) == 0 && l.first:
		batch, s.queue, l.spare = s.queue, l.spare[:0], nil
	case len(s.out) == 0:
		return nil, 0 // the first lane's, which is awake or about to be
	default:
		if l.first {
			batch = s.takeFree(l.spare[:0])
			l.spare = nil
			if len(batch) == 0 {
				l.spare = batch
				return nil, 0
			}
			break
		}
		if time.Now().After(s.out[0].until) {
			return nil, 0 // the node hangs, likely: no more calls into it
		}
		if wait = laneAfter - time.Since(s.out[0].sentAt); wait > 0 {
			return nil, wait
		}
		batch = s.takeFree(l.spare[:0])
		l.spare = nil
		if len(batch) == 0 {
			l.spare = batch
			return nil, 0
		}
	}
	l.keys, l.sentAt, l.until = l.keys[:0], time.Now(), latestDeadline(batch)
	if l.first {
		s.firstSent = l.sentAt
	}
	for i := range batch {
		l.keys = append(l.keys, batch[i].Op.Key)
		l.keys = append(l.keys, batch[i].Op.Keys...)
	}
	s.out = append(s.out, l)
	return batch, 0
}

// takeFree moves the queued calls that share no key with the batches out
// nor with a call left queued before them into batch. Callers hold s.mu.
func (s *stream) takeFree(batch []Call) []Call {
	busy := map[string]bool{}
	for _, o := range s.out {
		for _, k := range o.keys {
			busy[k] = true
		}
	}
	rest := s.queue[:0]
	for _, c := range s.queue {
		if sharesKey(busy, c.Op) {
			markKeys(busy, c.Op) // the calls after it that share a key wait too
			rest = append(rest, c)
			continue
		}
		batch = append(batch, c)
	}
	clear(s.queue[len(rest):])
	s.queue = rest
	return batch
}

func markKeys(keys map[string]bool, o *wire.Op) {
	keys[o.Key] = true
	for _, k := range o.Keys {
		keys[k] = true
	}
}

func sharesKey(keys map[string]bool, o *wire.Op) bool {
	if keys[o.Key] {
		return true
	}
	for _, k := range o.Keys {
		if keys[k] {
			return true
		}
	}
	return false
}

// finish ends lane l's batch, and keeps its slice for the next. When l
// is not the first lane and calls are queued, it wakes the first: calls
// that waited for l's batch (they share a key with it) are the first
// lane's to take once no batch is out, and the first lane, woken when
// they were queued, may have found them held back and gone back to wait.
func (s *stream) finish(l *lane, batch []Call) {
	now := time.Now()
	s.mu.Lock()
	s.sample(now.Sub(l.sentAt), now)
	if i := slices.Index(s.out, l); i >= 0 {
		s.out = slices.Delete(s.out, i, i+1)
	}
	if l.first {
		s.firstSent = time.Time{}
		if s.moreArmed {
			s.moreTimer.Stop()
			s.moreArmed = false
		}
	}
	wake := !l.first && len(s.queue) > 0
	s.mu.Unlock()
	if wake {
		signal(s.wake)
	}
	clear(batch)
	clear(l.keys) // once no other lane reads them (takeFree)
	l.spare, l.keys = batch[:0], l.keys[:0]
}
