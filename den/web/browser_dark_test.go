package web_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
)

// colorScheme makes the page's system prefer scheme ("light" or "dark"),
// as prefers-color-scheme sees it.
func colorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	})
}

// pageColors reads, for each selector, the first matching element's
// computed text colour (or, for an SVG shape, its stroke or fill) and
// the background it is drawn on: its own, or its nearest ancestor's that
// is not transparent. A selector that matches nothing is missing.
const pageColors = `(sels => JSON.stringify(Object.fromEntries(sels.map(([sel, prop]) => {
	const el = document.querySelector(sel);
	if (!el) return [sel, null];
	let bg = "", at = el;
	for (; at; at = at.parentElement) {
		bg = getComputedStyle(at).backgroundColor;
		if (bg !== "transparent" && !/^rgba\(.*, 0\)$/.test(bg)) break;
	}
	if (!at) bg = "rgb(255, 255, 255)";
	return [sel, {fg: getComputedStyle(el)[prop], bg: bg}];
}))))`

// colorPair is what pageColors reads of one element.
type colorPair struct{ FG, BG string }

// rgbOf parses a computed colour, rgb(r, g, b) or rgba(r, g, b, a).
var rgbOf = regexp.MustCompile(`^rgba?\((\d+), (\d+), (\d+)`)

// luminance is a colour's relative luminance (WCAG 2).
func luminance(t *testing.T, color string) float64 {
	t.Helper()
	m := rgbOf.FindStringSubmatch(color)
	if m == nil {
		t.Fatalf("cannot read the colour %q", color)
	}
	l := 0.0
	for i, w := range []float64{0.2126, 0.7152, 0.0722} {
		v, _ := strconv.ParseFloat(m[i+1], 64)
		c := v / 255
		if c <= 0.03928 {
			c /= 12.92
		} else {
			c = math.Pow((c+0.055)/1.055, 2.4)
		}
		l += w * c
	}
	return l
}

// contrast is the WCAG 2 contrast ratio of two colours, 1 to 21.
func contrast(t *testing.T, a, b string) float64 {
	t.Helper()
	la, lb := luminance(t, a), luminance(t, b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

// What the dark scheme is checked on, each with the contrast it needs
// against what it is drawn on: 4.5:1 for text (WCAG AA), 3:1 for a
// chart's lines, which are not text. Its colour differs from the light
// scheme's, or, for what is light on dark in both (the header, the
// output), the background it is drawn on does.
var darkChecks = []struct {
	page, sel, prop string
	min             float64
	sameFG          bool
}{
	{"/", "body", "color", 4.5, false},
	{"/", "header .brand", "color", 4.5, true},
	{"/", `tr.queue[data-queue="resize"] a.queue-link`, "color", 4.5, false},
	{"/", "th", "color", 4.5, false},
	{"/", "figure.chart figcaption", "color", 4.5, false},
	{"/", "svg.chart text.axis", "fill", 4.5, false},
	{"/", "svg.chart g.series.c-ok", "stroke", 3, false},
	{"/", "svg.chart g.series.c-bad", "stroke", 3, false},
	{"/", "svg.chart g.series.c-todo", "stroke", 3, false},
	{"/", "svg.chart g.series.c-load", "stroke", 3, false},
	{"/", "figcaption .key line.c-run", "stroke", 3, false},
	{"/queues/resize", `tr.count[data-status="1"] .status`, "color", 4.5, false},
	{"/queues/resize", `tr.count[data-status="2"] .status`, "color", 4.5, false},
	{"/queues/resize", `tr.count[data-status="0"] .status`, "color", 4.5, false},
	{"/queues/resize", `tr.count[data-status="-2"] .status`, "color", 4.5, false},
	{"/tasks/DONE", "#stdout", "color", 4.5, true},
	{"/tasks/DONE", "#stderr", "color", 4.5, true},
	{"/tasks/DONE", "dl.facts dt", "color", 4.5, false},
}

// The page follows the system's colour scheme. In Chromium told that the
// system prefers dark, the overview (with its charts), a queue's page and
// a task's page have a dark background and light text, and every colour
// checked differs from the light scheme's (the charts' SVG lines too)
// and keeps its contrast against what it is drawn on; the light scheme
// is held to the same contrasts. With DEN_WEB_SCREENSHOTS it saves
// status-dark.png there.
func TestBrowserDarkScheme(t *testing.T) {
	bin := chromium(t)
	t.Parallel()
	f := newFixture(t)
	seedDayOfStats(t, f.db)
	srv := serve(t, f.db, "")
	ctx, do := browser(t, bin)

	read := func(scheme, page string, sels [][2]string) map[string]*colorPair {
		t.Helper()
		if page == "/tasks/DONE" {
			page = "/tasks/" + f.done.Hex()
		}
		do("open "+page+" in the "+scheme+" scheme", colorScheme(scheme), chromedp.Navigate(srv.URL+page),
			chromedp.WaitVisible(chromedp.CSS("main")))
		js, _ := json.Marshal(sels)
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](pageColors+"("+string(js)+")"))
		if err != nil {
			t.Fatalf("read the colours of %s: %v", page, err)
		}
		got := map[string]*colorPair{}
		if err := json.Unmarshal([]byte(s), &got); err != nil {
			t.Fatalf("colours of %s: %v: %s", page, err, s)
		}
		return got
	}
	pages := map[string][][2]string{}
	var order []string
	for _, c := range darkChecks {
		if pages[c.page] == nil {
			order = append(order, c.page)
		}
		pages[c.page] = append(pages[c.page], [2]string{c.sel, c.prop})
	}
	colors := map[string]*colorPair{}
	for _, scheme := range []string{"light", "dark"} {
		for _, page := range order {
			for sel, p := range read(scheme, page, pages[page]) {
				colors[scheme+" "+page+" "+sel] = p
			}
		}
	}

	for _, c := range darkChecks {
		light, dark := colors["light "+c.page+" "+c.sel], colors["dark "+c.page+" "+c.sel]
		if light == nil || dark == nil {
			t.Errorf("%s: no %s on the page", c.page, c.sel)
			continue
		}
		if !c.sameFG && light.FG == dark.FG {
			t.Errorf("%s %s: %s %s in both schemes", c.page, c.sel, c.prop, light.FG)
		}
		if c.sameFG && light.BG == dark.BG {
			t.Errorf("%s %s: drawn on %s in both schemes", c.page, c.sel, light.BG)
		}
		for scheme, p := range map[string]*colorPair{"light": light, "dark": dark} {
			if r := contrast(t, p.FG, p.BG); r < c.min {
				t.Errorf("%s scheme, %s %s: %s %s on %s, contrast %.2f:1, want at least %.1f:1", scheme, c.page, c.sel, c.prop, p.FG, p.BG, r, c.min)
			}
		}
	}
	// The page itself: a dark background with light text, not the light one.
	light, dark := colors["light / body"], colors["dark / body"]
	if light != nil && dark != nil {
		if luminance(t, dark.BG) > 0.05 || luminance(t, dark.FG) < 0.5 || luminance(t, light.BG) < 0.9 {
			t.Errorf("body: light %s on %s, dark %s on %s: want dark text on light, then light text on dark", light.FG, light.BG, dark.FG, dark.BG)
		}
	}
	if t.Failed() {
		b, _ := json.MarshalIndent(colors, "", " ")
		t.Logf("colours read: %s", b)
	}

	if dir := os.Getenv(envScreenshots); dir != "" {
		do("the overview in the dark scheme", colorScheme("dark"), chromedp.EmulateViewport(1200, 900),
			chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`#charts svg.chart`)))
		shot(t, ctx, filepath.Join(dir, "status-dark.png"), 1200)
	}
}
