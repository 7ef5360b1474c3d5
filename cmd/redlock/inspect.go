package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/redlock-go/redlock"
)

// inspectReport is inspect's --json output.
type inspectReport struct {
	Key         string       `json:"key"`
	Nodes       []nodeReport `json:"nodes"`
	Quorum      int          `json:"quorum"`
	Reachable   int          `json:"reachable"`
	Held        bool         `json:"held"`             // by a majority
	Holder      string       `json:"holder,omitempty"` // the majority holder: its token's fingerprint, not the token
	Metadata    string       `json:"metadata,omitempty"`
	RemainingMs int64        `json:"remaining_ms,omitempty"` // -1: the keys have no TTL
}

type nodeReport struct {
	Node      string `json:"node"`
	Reachable bool   `json:"reachable"`
	Held      bool   `json:"held"`
	Holder    string `json:"holder,omitempty"`
	Metadata  string `json:"metadata,omitempty"`
	PTTLMs    int64  `json:"pttl_ms,omitempty"` // -1: no TTL
	Fence     uint64 `json:"fence,omitempty"`
	Waiting   int    `json:"waiting,omitempty"`         // Lock calls queued for the key on this node
	First     string `json:"first_waiter,omitempty"`    // the first of them: its Client's ID, a dot, a number
	WaitingR  int    `json:"waiting_readers,omitempty"` // how many of them are a read-write lock's readers (the others, writers)
	Readers   int    `json:"readers,omitempty"`         // a read-write lock's (rw:NAME) live readers on this node
	Error     string `json:"error,omitempty"`
}

func runInspect(args []string, stdout, stderr io.Writer) int {
	const name = "inspect"
	fs := newFlags(name, "[flags] KEY", stderr)
	var nf nodeFlags
	nf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	permits := fs.Int("permits", 0, "KEY is a semaphore of N permits: show each of its slots (JSON: an array)")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if fs.NArg() != 1 {
		return usageError(stderr, name, "want exactly one KEY, got %d arguments", fs.NArg())
	}
	key := fs.Arg(0)
	clients, err := nf.clients()
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer closeAll(clients)
	c, err := redlock.New(clients, nf.options()...)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reports, err := inspectKey(ctx, c, key, *permits)
	if errors.Is(err, redlock.ErrInvalidArgument) {
		return usageError(stderr, name, "%v", err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock inspect: %v\n", err)
		return failureStatus(err)
	}
	return printReports(stdout, reports, *permits, *asJSON)
}

// printReports prints what inspect found, as a table or JSON, and returns
// the exit status: exitUnreachable when too few nodes answered about a key.
func printReports(stdout io.Writer, reports []inspectReport, permits int, asJSON bool) int {
	status, held := 0, 0
	for _, r := range reports {
		if r.Reachable < r.Quorum {
			status = exitUnreachable
		}
		if r.Held {
			held++
		}
	}
	var out any = reports[0]
	if permits != 0 {
		out = reports
	}
	switch {
	case asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return exitFailure
		}
	case permits != 0:
		for _, r := range reports {
			fmt.Fprintf(stdout, "%s\n", r.Key)
			printTable(stdout, r)
			fmt.Fprintln(stdout)
		}
		fmt.Fprintf(stdout, "%d of %d permits held\n", held, permits)
	default:
		printTable(stdout, reports[0])
	}
	return status
}

// inspectKey reads key from every node: the lock, or with permits > 0
// the semaphore's slots.
func inspectKey(ctx context.Context, c *redlock.Client, key string, permits int) ([]inspectReport, error) {
	if permits == 0 {
		s, err := c.Inspect(ctx, key)
		if err != nil {
			return nil, err
		}
		return []inspectReport{report(key, s)}, nil
	}
	sem, err := c.Semaphore(key, permits)
	if err != nil {
		return nil, err
	}
	states, err := sem.Inspect(ctx)
	if err != nil {
		return nil, err
	}
	reports := make([]inspectReport, len(states))
	for i, st := range states {
		reports[i] = report(fmt.Sprintf("sem:%s:%d", key, i), st)
	}
	return reports, nil
}

func report(key string, s *redlock.KeyState) inspectReport {
	r := inspectReport{Key: key, Quorum: len(s.Nodes)/2 + 1}
	for _, n := range s.Nodes {
		nr := nodeReport{Node: n.Node, Reachable: n.Err == nil, Held: n.Held, Holder: n.Holder, Metadata: n.Metadata, Fence: n.Fence,
			Waiting: n.Waiting, First: n.FirstWaiter, WaitingR: n.WaitingReaders, Readers: n.Readers}
		if n.Err != nil {
			nr.Error = n.Err.Error()
		} else {
			r.Reachable++
		}
		if n.Held {
			nr.PTTLMs = n.TTL.Milliseconds()
			if n.TTL < 0 {
				nr.PTTLMs = -1
			}
		}
		r.Nodes = append(r.Nodes, nr)
	}
	r.Holder, r.Metadata, r.Held = s.Holder()
	if r.Held {
		r.RemainingMs = s.Remaining().Milliseconds()
		if s.Remaining() == math.MaxInt64 {
			r.RemainingMs = -1
		}
	}
	return r
}

func printTable(w io.Writer, r inspectReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tREACHABLE\tHELD\tHOLDER\tPTTL\tFENCE\tWAITING")
	for _, n := range r.Nodes {
		reach, held, holder, pttl, fence, waiting := "yes", "no", "-", "-", "-", "-"
		if !n.Reachable {
			reach, held = "no", "-"
		}
		if n.Readers > 0 {
			held = fmt.Sprintf("%d readers", n.Readers)
		}
		if n.Held {
			held, holder = "yes", holderText(n.Holder, n.Metadata)
			pttl = (time.Duration(n.PTTLMs) * time.Millisecond).String()
			if n.PTTLMs < 0 {
				pttl = "none"
			}
		}
		if n.Fence != 0 {
			fence = fmt.Sprint(n.Fence)
		}
		if n.Reachable {
			waiting = fmt.Sprint(n.Waiting)
			switch {
			case n.WaitingR > 0:
				waiting += fmt.Sprintf(" (%d reading; first %s)", n.WaitingR, n.First)
			case n.Waiting > 0:
				waiting += " (first " + n.First + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Node, reach, held, holder, pttl, fence, waiting)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, n := range r.Nodes {
		if !n.Reachable {
			fmt.Fprintf(w, "%s: %s\n", n.Node, n.Error)
		}
	}
	switch {
	case r.Held:
		left := (time.Duration(r.RemainingMs) * time.Millisecond).String()
		if r.RemainingMs < 0 {
			left = "ever (no TTL)"
		}
		fmt.Fprintf(w, "HELD by a majority (%d needed of %d): %s, for %s more\n", r.Quorum, len(r.Nodes), holderText(r.Holder, r.Metadata), left)
	case readNodes(r) >= r.Quorum:
		fmt.Fprintf(w, "READ: readers hold on %d of %d nodes (%d needed)\n", readNodes(r), len(r.Nodes), r.Quorum)
	case r.Reachable < r.Quorum:
		fmt.Fprintf(w, "UNKNOWN: only %d of %d nodes answered, %d needed\n", r.Reachable, len(r.Nodes), r.Quorum)
	default:
		fmt.Fprintf(w, "FREE: no holder has a majority (%d of %d needed)\n", r.Quorum, len(r.Nodes))
	}
}

// holderText shows a holder (its token's fingerprint) with the metadata.
func holderText(holder, meta string) string {
	if meta == "" {
		return holder
	}
	return fmt.Sprintf("%s (%s)", holder, meta)
}

// readNodes counts the nodes where readers of a read-write lock hold.
func readNodes(r inspectReport) int {
	n := 0
	for _, nr := range r.Nodes {
		if nr.Readers > 0 {
			n++
		}
	}
	return n
}
