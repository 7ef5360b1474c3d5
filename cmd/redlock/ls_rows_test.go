package main

import (
	"testing"

	"github.com/redlock-go/redlock"
)

// TestElectionRowGrants: an election's row shows the term that Leader
// would read: a grant's announcement only where a majority of nodes show
// its term, a proclaimed one from any node of the holder's, the latest
// of those; none (term 0) when no announcement counts.
func TestElectionRowGrants(t *testing.T) {
	row := func(metas ...string) lsRow {
		s := &redlock.KeyState{}
		for _, m := range metas {
			s.Nodes = append(s.Nodes, redlock.NodeState{Held: true, Holder: "h", Metadata: m})
		}
		return electionRow("e", &redlock.Listing{Keys: []string{"election:e"}, States: []*redlock.KeyState{s}}, 0)
	}
	for _, c := range []struct {
		name  string
		metas []string
		term  uint64
		value string
	}{
		{"a majority agree", []string{"127.1~ v", "127.1~ v", "127.1~ v", "130.1~ v", "193.1~ v"}, 127, "v"},
		{"each its own", []string{"127.1~ v", "127.1~ v", "128.1~ v", "130.1~ v", "193.1~ v"}, 0, "v"},
		{"proclaimed on one", []string{"127.1~ v", "128.1~ v", "193.1 w", "130.1~ v", "0.0 v"}, 193, "w"},
		{"a later value", []string{"127.1~ v", "127.2 w", "127.1~ v", "127.1~ v", "127.1 v"}, 127, "w"},
		{"not announced", []string{"0.0 v", "0.0 v", "0.0 v"}, 0, "v"},
	} {
		if r := row(c.metas...); r.Term != c.term || r.Metadata != c.value {
			t.Errorf("%s: term %d, value %q; want %d, %q", c.name, r.Term, r.Metadata, c.term, c.value)
		}
	}
}
