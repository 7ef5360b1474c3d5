package redlock

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-go/redlock/internal/wire"
)

// Election is a leader election over the Client's nodes, by name: at most
// one [Leadership] at a time, each with a term that is strictly larger
// than every earlier leadership's. It is a lock underneath, and reuses all
// of it: a candidate is a Lock waiting in the key's wait queue (so
// candidates are served in the order they started campaigning, across
// processes), a leadership is a lock with fencing (the fencing token is the
// term) and auto-extension, and Resign is its Unlock, which wakes the next
// candidate at once. The leader's value and term are stored with the lock
// on every node, so that [Election.Leader] and [Election.Observe] can read
// them.
//
// An election's key is "election:" + name: [Client.Inspect] of that key
// shows the leader (its metadata is the term, a space and the value).
// docs/election.md says what a term protects and what it does not.
type Election struct {
	c    *Client
	name string
	// target is the lock's: key "election:" + name, whose grant announces
	// the leader (wire.ModeElection).
	target
	lc lockConfig
}

// Leader is a leadership as the nodes show it: the value its leader
// advertises, and its term. Two Leaders are == when they are the same
// announcement (a value proclaimed again in the same term is a new one).
type Leader struct {
	Value string
	Term  uint64
	seq   uint64 // announcements in the term: orders a leader's values
}

const (
	electionInfix = "election:"
	// maxValueLen: the value shares the lock's metadata with the term.
	maxValueLen = maxMetadataLen - 21
	// observePoll bounds how long Observe goes without reading the leader,
	// should notices be lost.
	observePoll = 10 * time.Second
)

// campaignRetry is a candidate's default strategy: no delay of its own, so
// that a candidate looks at the queue only to refresh its place and when
// the leader's keys run out (see Client.lockQueued), and otherwise waits for the
// release that names it.
func campaignRetry(int) (time.Duration, bool) { return math.MaxInt64, true }

// Election returns the election called name (1 to 1015 bytes). Options:
// WithTTL (a leadership's TTL, by default the Client's), WithAutoExtend (how
// often a leadership is extended; TTL/3 by default) and WithRetry (how
// often a waiting candidate looks at the queue; by default only as often
// as its place needs refreshing, see WithWaiterLease). A leadership is
// never capped (WithMaxHold does not apply). All candidates of an election
// should use the same TTL.
func (c *Client) Election(name string, opts ...Option) (*Election, error) {
	key := electionInfix + name
	if name == "" {
		return nil, invalid("empty election name")
	}
	base := c.cfg.lock
	base.retry = nil // the Client's default is for locks
	lc, err := c.configure(base, key, toElection, opts)
	if err != nil {
		return nil, err
	}
	if lc.retry == nil {
		lc.retry = campaignRetry
	}
	lc.fencing, lc.autoExtend, lc.token = true, true, ""
	lc.maxHold = math.MaxInt64 / 2 // about 146 years: never capped
	t := c.target(key)
	t.mode = wire.ModeElection
	return &Election{c: c, name: name, target: t, lc: lc}, nil
}

// encodeLeader is the metadata a leader stores with the election's lock:
// its term (0 until announced), a dot, how many times it announced a value
// in that term, a space, and the value. A candidate's grant writes
// "TERM.1~" in place of "0.0" on each node, TERM being the counter that
// node handed out (wire's acquireElectionSrc): an announcement by grant.
func encodeLeader(term, seq uint64, value string) string {
	return strconv.FormatUint(term, 10) + "." + strconv.FormatUint(seq, 10) + " " + value
}

// decodeLeader reads a leader from the metadata of the election's lock;
// false if it is not an announced leader's. byGrant reports an
// announcement by grant, which holds only where a majority of nodes show
// its term (see leaderOf).
func decodeLeader(meta string) (ld Leader, ok, byGrant bool) {
	t, value, ok := strings.Cut(meta, " ")
	t, n, ok2 := strings.Cut(t, ".")
	n, byGrant = strings.CutSuffix(n, "~")
	term, err := strconv.ParseUint(t, 10, 64)
	seq, err2 := strconv.ParseUint(n, 10, 64)
	if !ok || !ok2 || err != nil || err2 != nil || term == 0 {
		return Leader{}, false, false
	}
	return Leader{Value: value, Term: term, seq: seq}, true, byGrant
}

// byProposal reports whether fence is a Client's proposal (≡ −1 mod
// wire.FenceModulus: no node's counter takes that residue), which a
// fenced acquisition's token is only when a majority of nodes took it
// (docs/fencing.md: a node that did not take it hands out more, so the
// write-back's maximum is never a proposal).
func byProposal(fence int64) bool { return fence%wire.FenceModulus == wire.FenceModulus-1 }

// newer reports whether ld was announced after old.
func (ld Leader) newer(old Leader) bool {
	return ld.Term > old.Term || ld.Term == old.Term && ld.seq > old.seq
}

// Leader returns the current leader: the holder of the election's lock on
// a majority of nodes, with the latest value and term it announced on any
// of them (an announcement is stored on a majority, so every majority sees
// it). It returns an error matching [ErrNoLeader] when no candidate holds
// a majority of the nodes, even counting the nodes that did not answer as
// its, or the one that does has not announced itself yet (it has just
// won); and a [*QuorumError] matching [ErrNotObtained] when too few nodes
// answered to tell. It
// returns as soon as the answers decide, so a node that does not answer
// costs nothing while the others agree.
//
// Like every read, the answer may be out of date by the time it is used: a
// leader's authority over a downstream system is its term, checked there
// (docs/election.md).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	c := e.c
	if err := ctx.Err(); err != nil {
		return Leader{}, err
	}
	if err := c.checkOpen(); err != nil {
		return Leader{}, err
	}
	q := c.quorum()
	r := c.send(ctx, request{op: wire.NewOp(wire.OpInspect, e.rkey, "", "", 0), timeout: c.nodeTimeout(e.lc.ttl),
		settled: func(rs []wire.Result) bool { return leaderOf(rs, q).decided }})
	r.finish(&c.bg, nil)
	v := leaderOf(r.results, q)
	switch {
	case v.announced && !mutated(mutLeaderBlind):
		return v.leader, nil
	case v.held:
		return Leader{}, fmt.Errorf("%w: %q: a candidate won, and has not announced itself yet", ErrNoLeader, e.name)
	case v.best+len(r.results)-v.answered < q:
		// Even the nodes that did not answer could not make a majority.
		return Leader{}, fmt.Errorf("%w: %q", ErrNoLeader, e.name)
	}
	qerr := quorumError("leader", e.key, c.nodes, c.quorum(), r, 0, ctx)
	qerr.Granted = v.answered
	qerr.detail = "too few nodes answered to tell the leader"
	return Leader{}, qerr
}

// vote is what a read of the election's lock found.
type vote struct {
	leader    Leader // the holder's latest announcement
	held      bool   // a token holds a majority of nodes
	announced bool   // and some node of those has its announcement
	answered  int    // nodes that answered
	best      int    // the most nodes one token holds
	decided   bool   // a token holds a majority, or none can, and no answer to come can announce it
}

// leaderOf reads inspect results rs (those not in yet are zero) with
// quorum q. An announcement by grant counts only where a majority of nodes
// show the holder with its term: each granting node wrote the counter it
// handed out, and they agree on a majority only when a majority took the
// candidate's proposal, which is then its term. Fewer, and the term is
// another (the write-back's), which the candidate proclaims next.
func leaderOf(rs []wire.Result, q int) vote {
	var v vote
	pending, agreeing := 0, 0
	for _, r := range rs {
		switch {
		case r.Undecided():
			pending++
		case r.Status == wire.StatusAbsent:
			v.answered++
		case r.Status == wire.StatusHeld:
			v.answered++
			token, meta, _ := strings.Cut(r.Value, "\x00")
			n := showing(rs, token, 0)
			v.best = max(v.best, n)
			if n < q {
				continue
			}
			v.held = true
			ld, ok, byGrant := decodeLeader(meta)
			if !ok {
				continue
			}
			if byGrant {
				agree := showing(rs, token, ld.Term)
				if agreeing = max(agreeing, agree); agree < q {
					continue
				}
			}
			if !v.announced || ld.newer(v.leader) {
				v.leader, v.announced = ld, true
			}
		}
	}
	v.decided = v.held && (v.announced || agreeing+pending < q) || v.best+pending < q
	return v
}

// showing counts the results in rs held by token and, unless term is 0,
// announcing term.
func showing(rs []wire.Result, token string, term uint64) int {
	n := 0
	for _, o := range rs {
		t, meta, _ := strings.Cut(o.Value, "\x00")
		if o.Status != wire.StatusHeld || t != token {
			continue
		}
		if term == 0 {
			n++
		} else if ld, ok, _ := decodeLeader(meta); ok && ld.Term == term {
			n++
		}
	}
	return n
}

// Observe returns a channel of the election's leaders, in term order: the
// current leader first, if there is one, then each new leader (and each
// new value a leader proclaims), until ctx ends or the Client is closed,
// when the channel is closed. A reader that falls behind skips to the
// latest leader; it never sees an older term after a newer one.
//
// It listens on every node for the notices that leaders send when they
// announce themselves (one subscription per node, for as long as it runs)
// and reads the leader as [Election.Leader] does after each; should
// notices be lost, it reads the leader every 10 s (or TTL/2 if shorter)
// anyway.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	c := e.c
	ch := make(chan Leader)
	if ctx.Err() != nil || c.checkOpen() != nil {
		close(ch)
		return ch
	}
	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	stops := make([]func(), len(c.nodes))
	for i, n := range c.nodes {
		// A subscription confirmed is a reason to read too: a leader
		// announced before it was would go unseen until the next poll.
		stops[i] = n.Watch(e.rkey+":leader", func(string, string) { notify() }, notify)
	}
	c.bg.Go(func() {
		defer func() {
			var wg sync.WaitGroup
			for _, stop := range stops {
				wg.Go(stop)
			}
			wg.Wait()
		}()
		e.observe(ctx, ch, kick)
	})
	return ch
}

// observe is Observe's loop: it reads the leader when kicked and every
// poll period, and hands ch each leader newer than the last it had.
func (e *Election) observe(ctx context.Context, ch chan<- Leader, kick <-chan struct{}) {
	defer close(ch)
	poll := time.NewTimer(0)
	defer poll.Stop()
	var (
		latest  Leader // the newest leader read
		pending bool   // latest has not been handed over yet
	)
	for {
		var out chan<- Leader
		if pending {
			out = ch
		}
		select {
		case <-ctx.Done():
			return
		case <-e.c.closed:
			return
		case out <- latest:
			pending = false
			continue
		case <-kick:
		case <-poll.C:
			poll.Reset(min(observePoll, e.lc.ttl/2))
		}
		ld, err := e.Leader(ctx)
		if err == nil && ld.newer(latest) && (latest.Term == 0 || !mutated(mutObserveStuck)) {
			latest, pending = ld, true
		}
	}
}
