package main

import (
	"fmt"
	"math"
	"strings"
)

// bar is one row of a horizontal bar chart.
type bar struct {
	Label string  // left of the bar
	Value float64 // its length
	Text  string  // right of the bar
	Lib   string  // picks the colour
}

var libColour = map[string]string{
	"floor":     "#8c8c8c",
	"redislock": "#7a5195",
	"bare":      "#bcbcbc",
	"redsync":   "#ef5675",
	"redlock":   "#2f7ed8",
}

var xmlText = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// barChart draws a horizontal bar chart as a standalone SVG document. With
// logScale the axis is logarithmic (for values spanning decades, such as
// 1 ms against 5 s). mark, when above 0, draws a dashed line there (a
// target) labelled markLabel.
func barChart(title, axis string, bars []bar, logScale bool, mark float64, markLabel string) string {
	const (
		width   = 940
		left    = 370 // label column
		right   = 100 // room for the value text
		top     = 62
		rowH    = 24
		barH    = 16
		bottomH = 44
	)
	plotW := float64(width - left - right)
	height := top + rowH*len(bars) + bottomH

	x, ticks := scale(bars, plotW, logScale, mark)

	var s strings.Builder
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", width, height, width, height)
	fmt.Fprintf(&s, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&s, `<text x="%d" y="22" font-size="16" font-weight="bold">%s</text>`+"\n", 10, xmlText.Replace(title))
	plotBottom := top + rowH*len(bars)
	for _, t := range ticks {
		tx := float64(left) + x(t)
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`+"\n", tx, top-4, tx, plotBottom)
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", tx, plotBottom+16, tickLabel(t))
	}
	for i, b := range bars {
		y := top + rowH*i
		colour := libColour[b.Lib]
		if colour == "" {
			colour = "#444444"
		}
		w := max(x(b.Value), 1)
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH-3, xmlText.Replace(b.Label))
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, w, barH, colour)
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" fill="#222">%s</text>`+"\n", float64(left)+w+5, y+barH-3, xmlText.Replace(b.Text))
	}
	if mark > 0 {
		mx := float64(left) + x(mark)
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="5,4" stroke-width="1.5"/>`+"\n", mx, top-8, mx, plotBottom)
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" fill="#d62728" text-anchor="middle">%s</text>`+"\n", mx, top-14, xmlText.Replace(markLabel))
	}
	fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s</text>`+"\n", float64(left)+plotW/2, plotBottom+36, xmlText.Replace(axis))
	s.WriteString("</svg>\n")
	return s.String()
}

// scale returns the plot's x of a value (0 to plotW) and the axis ticks:
// logarithmic with logScale, else linear from 0; both reach the largest
// bar and the mark.
func scale(bars []bar, plotW float64, logScale bool, mark float64) (x func(v float64) float64, ticks []float64) {
	hi := mark
	lo := math.Inf(1)
	for _, b := range bars {
		hi = max(hi, b.Value)
		if b.Value > 0 {
			lo = min(lo, b.Value)
		}
	}
	if hi <= 0 {
		hi = 1
	}
	if logScale {
		if math.IsInf(lo, 1) {
			lo = hi / 10
		}
		l0, l1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if l1 == l0 {
			l1++
		}
		x = func(v float64) float64 {
			if v <= 0 {
				return 0
			}
			return plotW * (math.Log10(v) - l0) / (l1 - l0)
		}
		for e := l0; e <= l1; e++ {
			ticks = append(ticks, math.Pow(10, e))
		}
	} else {
		step := niceStep(hi / 5)
		hi = math.Ceil(hi/step) * step
		x = func(v float64) float64 { return plotW * v / hi }
		for t := 0.0; t <= hi+step/2; t += step {
			ticks = append(ticks, t)
		}
	}

	return x, ticks
}

// niceStep rounds a raw tick step up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func tickLabel(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", v), "0"), ".")
	default:
		return strings.TrimRight(fmt.Sprintf("%.3f", v), "0")
	}
}
