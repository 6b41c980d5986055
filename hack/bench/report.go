package main

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// series is one measured quantity's samples.
type series struct {
	name string
	d    []time.Duration
}

func (s *series) add(d time.Duration) { s.d = append(s.d, d) }

// q is the nearest-rank quantile (0 < p <= 1).
func (s *series) q(p float64) time.Duration {
	if len(s.d) == 0 {
		return 0
	}
	d := slices.Clone(s.d)
	slices.Sort(d)
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return d[max(i, 0)]
}

func (s *series) p50() time.Duration { return s.q(0.5) }
func (s *series) p99() time.Duration { return s.q(0.99) }

// ms formats a duration in milliseconds with sensible precision.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// cdfPlot draws each series' empirical CDF on a log time axis.
func cdfPlot(title, path string, ss ...series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of calls ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = false
	for i, s := range ss {
		d := slices.Clone(s.d)
		slices.Sort(d)
		pts := make(plotter.XYs, len(d))
		for j, v := range d {
			pts[j].X = math.Max(float64(v)/float64(time.Millisecond), 0.001)
			pts[j].Y = float64(j+1) / float64(len(d))
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (p50 %s)", s.name, ms(s.p50())), l)
	}
	p.Legend.XOffs = -vg.Points(4)
	p.Legend.YOffs = vg.Points(4)
	p.BackgroundColor = color.White
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}
