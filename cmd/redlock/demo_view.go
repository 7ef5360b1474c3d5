package main

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlock-go/redlock"
)

// This file is what the demo draws: each tick's line, and the summary.

func (d *demo) holderName() string {
	if h := d.holder.Load(); h > 0 {
		return fmt.Sprintf("worker %d", h)
	}
	return "nobody"
}

// draw repaints the live view in place, over the prev lines drawn last
// time, and returns how many it drew.
func (d *demo) draw(start time.Time, rate, refRate float64, prev int) int {
	var b strings.Builder
	if prev > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", prev) // back to the top of the view
	}
	line := func(format string, args ...any) {
		b.WriteString("\x1b[2K") // clear the line
		fmt.Fprintf(&b, format, args...)
		b.WriteString("\n")
	}
	elapsed := min(time.Since(start), d.cfg.duration)
	const width = 40
	done := int(float64(width) * elapsed.Seconds() / d.cfg.duration.Seconds())
	line("  [%s%s] %4.1fs / %v", strings.Repeat("█", done), strings.Repeat("░", width-done), elapsed.Seconds(), d.cfg.duration)
	var nodes strings.Builder
	for i := range d.up {
		if d.up[i].Load() {
			fmt.Fprintf(&nodes, "\x1b[32m●\x1b[0m%d ", i+1)
		} else {
			fmt.Fprintf(&nodes, "\x1b[31m○\x1b[0m%d ", i+1)
		}
	}
	up, q := d.upCount(), len(d.nodes)/2+1
	majority := "\x1b[32mmajority up\x1b[0m"
	if up < q {
		majority = "\x1b[31mno majority: the lock cannot be had\x1b[0m"
	}
	line("  nodes     %s  %d of %d up, %d needed: %s", nodes.String(), up, len(d.nodes), q, majority)
	line("  holder    %-9s  fence %d", d.holderName(), d.fence.Load())
	line("  rate      %.0f acquisitions/s, %.0f refusals/s", rate, refRate)
	line("  so far    %d acquisitions, %d hand-offs, %d refusals, %d violations", d.acquired.Load(), d.handoffs.Load(), d.refusals.Load(), d.violations.Load())
	d.mu.Lock()
	events := d.events[max(len(d.events)-3, 0):]
	d.mu.Unlock()
	for i := range 3 {
		if i < len(events) {
			line("  %s", events[i])
		} else {
			line("")
		}
	}
	fmt.Fprint(d.out, b.String())
	return 8
}

func (d *demo) summary(elapsed time.Duration) {
	acq := d.acquired.Load()
	fmt.Fprintf(d.out, "\nSummary after %.1fs:\n", elapsed.Seconds())
	fmt.Fprintf(d.out, "  acquisitions      %d (%.0f/s)\n", acq, float64(acq)/elapsed.Seconds())
	fmt.Fprintf(d.out, "  hand-offs         %d (the lock went to another worker)\n", d.handoffs.Load())
	fmt.Fprintf(d.out, "  refusals          %d (attempts that did not get a majority)\n", d.refusals.Load())
	fmt.Fprintf(d.out, "  violations        %d (two holders at once, or a fencing token that went backwards)\n", d.violations.Load())
	fmt.Fprintf(d.out, "  lock unavailable  %.1fs (no holder while the workers wanted it)\n", d.unavailable.Seconds())
	if d.violations.Load() > 0 {
		fmt.Fprintln(d.out, "\nVIOLATIONS FOUND: please report this at https://github.com/redlock-go/redlock/issues")
	}
}

// countRefusals counts failed attempts through the observer hook.
func countRefusals(n *atomic.Int64) redlock.Observer {
	return func(e redlock.Event) {
		if e.Kind == redlock.EventAcquire && e.Err != nil {
			n.Add(1)
		}
	}
}
