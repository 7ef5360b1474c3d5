package redlock

import "sync"

// serial is a lock's turn to run an Extend, Proclaim or Unlock: one at a
// time. The turn is held across a quorum round, so a caller that has to
// wait waits on a channel of its own, handed the turn by leave: a goroutine
// blocked on a sync.Mutex is not durably blocked in a testing/synctest
// bubble, and a second Unlock (Close's, beside Do's) held on one stopped
// the simulator's virtual time. The uncontended path allocates nothing.
type serial struct {
	mu   sync.Mutex
	held bool            // someone has the turn
	wait []chan struct{} // the callers waiting for it, first first
}

// enter waits for the turn; leave ends it.
func (s *serial) enter() {
	s.mu.Lock()
	if !s.held {
		s.held = true
		s.mu.Unlock()
		return
	}
	turn := make(chan struct{})
	s.wait = append(s.wait, turn)
	s.mu.Unlock()
	<-turn // handed over: held stays true
}

// leave hands the turn to the first caller waiting, if any.
func (s *serial) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.wait) == 0 {
		s.held = false
		return
	}
	close(s.wait[0])
	s.wait = s.wait[1:]
}
