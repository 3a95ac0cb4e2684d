package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// writeChart draws p50 and p99 latency against concurrency for the 2 KB
// Deployment review over keep-alive, for the webhook and the limit, with a
// logarithmic latency axis.
func writeChart(path string, scenarios []scenario, results map[string]map[scenario][]result) error {
	var xs []scenario
	for _, sc := range scenarios {
		if sc.body == "deployment-2k" && !sc.handshake {
			xs = append(xs, sc)
		}
	}
	type series struct {
		label string
		color color.RGBA
		dash  bool
		pick  func(summary) float64
		who   string
	}
	blue, grey := color.RGBA{0x1f, 0x5f, 0xbf, 0xff}, color.RGBA{0x90, 0x90, 0x90, 0xff}
	all := []series{
		{"webhook p99", blue, true, func(s summary) float64 { return s.p99 }, "webhook"},
		{"webhook p50", blue, false, func(s summary) float64 { return s.p50 }, "webhook"},
		{"limit p99", grey, true, func(s summary) float64 { return s.p99 }, "limit"},
		{"limit p50", grey, false, func(s summary) float64 { return s.p50 }, "limit"},
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range all {
		for _, sc := range xs {
			v := s.pick(summarize(results[s.who][sc]))
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	lo, hi = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))

	const w, h, left, right, top, bottom = 800, 480, 70, 160, 40, 50
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	black := color.RGBA{0, 0, 0, 0xff}
	light := color.RGBA{0xe0, 0xe0, 0xe0, 0xff}
	px := func(i int) int { return left + i*(w-left-right)/max(len(xs)-1, 1) }
	py := func(v float64) int {
		return h - bottom - int(math.Log10(v/lo)/math.Log10(hi/lo)*float64(h-top-bottom))
	}
	for v := lo; v <= hi*1.001; v *= 10 {
		line(img, left, py(v), w-right, py(v), light, false)
		label(img, 8, py(v)+4, fmt.Sprintf("%g ms", v), black)
	}
	line(img, left, top, left, h-bottom, black, false)
	line(img, left, h-bottom, w-right, h-bottom, black, false)
	for i, sc := range xs {
		label(img, px(i)-8, h-bottom+18, fmt.Sprint(sc.connections), black)
	}
	label(img, (w-right)/2-60, h-12, "connections (HTTP/1.1 keep-alive)", black)
	label(img, left, 24, "latency of a 2 KB Deployment review: webhook vs. a bare net/http server", black)
	for k, s := range all {
		for i := 1; i < len(xs); i++ {
			a, b := s.pick(summarize(results[s.who][xs[i-1]])), s.pick(summarize(results[s.who][xs[i]]))
			line(img, px(i-1), py(a), px(i), py(b), s.color, s.dash)
		}
		ly := top + 20 + 20*k
		line(img, w-right+15, ly-4, w-right+45, ly-4, s.color, s.dash)
		label(img, w-right+52, ly, s.label, black)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// line draws a 2-pixel line from (x0,y0) to (x1,y1), dashed if asked.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, dashed bool) {
	steps := max(abs(x1-x0), abs(y1-y0), 1)
	for i := 0; i <= steps; i++ {
		if dashed && (i/6)%2 == 1 {
			continue
		}
		x := x0 + (x1-x0)*i/steps
		y := y0 + (y1-y0)*i/steps
		img.Set(x, y, c)
		img.Set(x, y+1, c)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
