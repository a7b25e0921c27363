package console

import (
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// pageNames are the templates under templates/, one a page.
var pageNames = []string{"login", "error", "overview", "tail", "receipt", "receipts", "resource", "queue"}

func (c *Console) parsePages() map[string]*template.Template {
	base := template.Must(template.New("").Funcs(template.FuncMap{
		"asset":   c.assetURL,
		"utc":     utc,
		"iso":     func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"ago":     func(t time.Time) string { return ago(c.now(), t) },
		"spark":   spark,
		"size":    size,
		"dur":     dur,
		"status":  func(code int) string { return strconv.Itoa(code) + " " + http.StatusText(code) },
		"pick":    pick,
		"targets": targets,
		"clock":   func(t time.Time) string { return t.UTC().Format("15:04:05 UTC") },
	}).ParseFS(files, "templates/layout.html"))
	pages := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		pages[name] = template.Must(template.Must(base.Clone()).ParseFS(files, "templates/"+name+".html"))
	}
	return pages
}

// sourceSelect is a select of the configured sources.
type sourceSelect struct {
	ID, Name, Selected string
	Sources            []Source
	Any                bool // offers "every source"
}

func pick(sources []Source, id, name, selected string, any bool) sourceSelect {
	return sourceSelect{ID: id, Name: name, Selected: selected, Sources: sources, Any: any}
}

// targetSelect is a select of sources and their routes, for the filter
// of the queue and receipts pages: a value is a source (every route of
// it) or source/route.
type targetSelect struct {
	ID     string
	Groups []targetGroup
}

// targetGroup is a source's options; one without a Label is a source
// without routes, whose one option stands alone.
type targetGroup struct {
	Label   string
	Options []targetOption
}

type targetOption struct {
	Value, Label string
	Selected     bool
}

// targets is the target select of sources with selected chosen: the
// sources that forward, or, with all, every source. A selected target
// the configuration no longer has is offered too, so that the select
// shows what the page shows.
func targets(sources []Source, id, selected string, all bool) targetSelect {
	ts := targetSelect{ID: id}
	found := selected == ""
	option := func(value, label string) targetOption {
		found = found || value == selected
		return targetOption{Value: value, Label: label, Selected: value == selected}
	}
	for _, s := range sources {
		switch {
		case s.Forwards():
			g := targetGroup{Label: s.Name, Options: []targetOption{option(s.Name, s.Name+": every route")}}
			for _, r := range s.Routes {
				g.Options = append(g.Options, option(s.Name+"/"+r.Name, s.Name+" / "+r.Name))
			}
			ts.Groups = append(ts.Groups, g)
		case all:
			ts.Groups = append(ts.Groups, targetGroup{Options: []targetOption{option(s.Name, s.Name)}})
		}
	}
	if !found {
		ts.Groups = append(ts.Groups, targetGroup{Label: "not configured",
			Options: []targetOption{{Value: selected, Label: strings.ReplaceAll(selected, "/", " / "), Selected: true}}})
	}
	return ts
}

func utc(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

// ago says how long before now t is, or how long after, roughly; the page's
// script keeps it current. console.js words it the same way.
func ago(now, t time.Time) string {
	d := now.Sub(t)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, ""
	}
	var s string
	switch {
	case d < 10*time.Second:
		return "just now"
	case d < time.Minute:
		s = strconv.Itoa(int(d/time.Second)) + " s"
	case d < time.Hour:
		s = strconv.Itoa(int(d/time.Minute)) + " min"
	case d < 48*time.Hour:
		s = strconv.Itoa(int(d/time.Hour)) + " h"
	default:
		s = strconv.Itoa(int(d/(24*time.Hour))) + " days"
	}
	if suffix == "" {
		return "in " + s
	}
	return s + suffix
}

func size(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// Sparkline geometry: one bar a minute.
const (
	barWidth  = 6
	barGap    = 1
	sparkHigh = 24
)

// spark draws m's minutes as bars, scaled to the busiest, with the counts
// in words for a screen reader. It writes numbers and m's fixed name only.
func spark(m metric) template.HTML {
	var peak int64
	for _, v := range m.Row {
		peak = max(peak, v)
	}
	words := make([]string, len(m.Row))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark %s" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="`,
		m.Name, len(m.Row)*barWidth, sparkHigh, len(m.Row)*barWidth, sparkHigh)
	for i, v := range m.Row {
		words[i] = strconv.FormatInt(v, 10)
	}
	fmt.Fprintf(&b, "%s per minute%s, the last %d minutes: %s\">", m.Name, unit(m.Unit), len(m.Row), strings.Join(words, ", "))
	for i, v := range m.Row {
		h := 1
		class := "zero"
		if v > 0 {
			h, class = max(2, int(float64(v)/float64(peak)*sparkHigh)), "bar"
		}
		fmt.Fprintf(&b, `<rect class="%s" x="%d" y="%d" width="%d" height="%d"/>`, class, i*barWidth, sparkHigh-h, barWidth-barGap, h)
	}
	b.WriteString("</svg>")
	return template.HTML(b.String())
}

func unit(u string) string {
	if u == "" {
		return ""
	}
	return " (" + u + ")"
}
