package redlock

// A Lock runs one Extend, Proclaim or Unlock at a time: its serial turn.

// lockSerial waits for the lock's turn to run an Extend, Proclaim or
// Unlock; unserial ends it. The turn is held across a quorum round, so a
// caller that has to wait waits on a channel of its own, handed the turn
// by unserial: a goroutine blocked on a sync.Mutex is not durably blocked
// in a testing/synctest bubble, and a second Unlock (Close's, beside
// Do's) held on one stopped the simulator's virtual time. The uncontended
// path allocates nothing.
func (l *Lock) lockSerial() {
	l.serialMu.Lock()
	if !l.serialHeld {
		l.serialHeld = true
		l.serialMu.Unlock()
		return
	}
	turn := make(chan struct{})
	l.serialWait = append(l.serialWait, turn)
	l.serialMu.Unlock()
	<-turn // handed over: serialHeld stays true
}

// unserial hands the turn to the first caller waiting, if any.
func (l *Lock) unserial() {
	l.serialMu.Lock()
	defer l.serialMu.Unlock()
	if len(l.serialWait) == 0 {
		l.serialHeld = false
		return
	}
	close(l.serialWait[0])
	l.serialWait = l.serialWait[1:]
}
