package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"github.com/redlock-go/redlock"
)

// lsArgs is what `redlock ls` was asked.
type lsArgs struct {
	nf      nodeFlags
	pattern string
	limit   int
	asJSON  bool
	watch   bool
}

// lsReport is ls's --json output.
type lsReport struct {
	Locks      []lsRow  `json:"locks"`
	ScanErrors []string `json:"scan_errors,omitempty"` // a node's, naming it: keys held only there are not listed
	Truncated  bool     `json:"truncated,omitempty"`
}

// runLs is `redlock ls`: every lock on the nodes whose name matches
// PATTERN, one row each, with the majority's verdict.
func runLs(args []string, stdout, stderr io.Writer) int {
	const name = "ls"
	fs := newFlags(name, "[flags] [PATTERN]", stderr)
	var a lsArgs
	a.nf.register(fs)
	fs.IntVar(&a.limit, "limit", 1000, "inspect at most this many lock keys (0: all)")
	fs.BoolVar(&a.asJSON, "json", false, "print JSON instead of a table")
	fs.BoolVar(&a.watch, "watch", false, "redraw every second until interrupted")
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	switch {
	case fs.NArg() > 1:
		return usageError(stderr, name, "want at most one PATTERN, got %d arguments", fs.NArg())
	case a.limit < 0:
		return usageError(stderr, name, "--limit %d is negative", a.limit)
	}
	a.pattern = "*"
	if fs.NArg() == 1 {
		a.pattern = fs.Arg(0)
	}
	clients, err := a.nf.clients()
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer closeAll(clients)
	c, err := redlock.New(clients, a.nf.options()...)
	if err != nil {
		return usageError(stderr, name, "%v", err)
	}
	defer c.Close(context.Background())
	if !a.watch {
		return a.once(c, stdout, stderr)
	}
	return a.watchLoop(c, stdout, stderr)
}

// once lists and prints one time.
func (a *lsArgs) once(c *redlock.Client, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := c.List(ctx, a.pattern, a.limit)
	if errors.Is(err, redlock.ErrInvalidArgument) {
		return usageError(stderr, "ls", "%v", err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock ls: %v\n", err)
		return failureStatus(err)
	}
	rep := lsReport{Locks: rows(l), Truncated: l.Truncated}
	for _, err := range l.ScanErrors {
		rep.ScanErrors = append(rep.ScanErrors, err.Error())
		fmt.Fprintf(stderr, "redlock ls: %v\n", err)
	}
	if a.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitFailure
		}
		return 0
	}
	printLs(stdout, rep)
	return 0
}

// watchLoop redraws the listing every second until a signal.
func (a *lsArgs) watchLoop(c *redlock.Client, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		fmt.Fprint(stdout, "\x1b[H\x1b[2J") // home, clear
		fmt.Fprintf(stdout, "redlock ls %s   %s\n\n", a.pattern, time.Now().Format(time.TimeOnly))
		if status := a.once(c, stdout, stderr); status != 0 {
			return status
		}
		select {
		case <-sigs:
			return 0
		case <-t.C:
		}
	}
}

// printLs prints the rows as a table.
func printLs(w io.Writer, rep lsReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tVERDICT\tHOLDER\tLEFT\tFENCE/TERM\tWAITING\tANSWERED\tMETADATA")
	for _, r := range rep.Locks {
		left := "-"
		switch {
		case r.RemainingMs == -1:
			left = "no TTL"
		case r.RemainingMs > 0:
			left = (time.Duration(r.RemainingMs) * time.Millisecond).String()
		}
		fence := "-"
		if r.Term > 0 {
			fence = fmt.Sprintf("term %d", r.Term)
		} else if r.Fence > 0 {
			fence = fmt.Sprint(r.Fence)
		}
		holder := r.Holder
		if holder == "" {
			holder = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d/%d\t%s\n", r.Kind, r.Name, r.Verdict, holder, left, fence, r.Waiting, r.Answered, r.Nodes, r.Metadata)
	}
	_ = tw.Flush()
	if len(rep.Locks) == 0 {
		fmt.Fprintln(w, "no locks")
	}
	if rep.Truncated {
		fmt.Fprintln(w, "(more keys may match: raise --limit)")
	}
}
