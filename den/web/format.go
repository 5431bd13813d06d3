package web

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/queue"
)

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	"when":         when,
	"queueURL":     queueURL,
	"nodeURL":      nodeURL,
	"schedulePath": func(name string) string { return "/schedules/" + url.PathEscape(name) },
	"ago":          ago,
	"group":        func(status int) string { return queue.StatusGroup(status) },
	"status":       statusText,
	"waiting":      human.Waiting,
	"priority":     func(t queue.Task) string { return queue.PriorityText(t.Raw.Lookup(queue.FieldPriority)) },
	"mb":           megabytes,
	"load": func(l []float64) string {
		parts := make([]string, len(l))
		for i, f := range l {
			parts[i] = strconv.FormatFloat(f, 'f', 2, 64)
		}
		return strings.Join(parts, " ")
	},
	"short": func(s string, n int) string {
		r := []rune(s)
		if len(r) <= n {
			return s
		}
		return string(r[:n-1]) + "…"
	},
	"bytes": func(n int64) string { return byteSize(n) },
	// queueName is a queue's name as pages show it (queue.ShownName).
	"queueName": queue.ShownName,
}

// when renders a time as a <time> element: UTC on the server, turned into
// the browser's local time by app.js.
func when(t time.Time) template.HTML {
	if t.IsZero() {
		return "-"
	}
	u := t.UTC()
	return template.HTML(fmt.Sprintf(`<time datetime="%s">%s</time>`, u.Format(time.RFC3339Nano), u.Format("2006-01-02 15:04:05 UTC")))
}

// ago and statusText render for people, the same way everywhere (den/internal/human).
var (
	ago        = human.Ago
	statusText = human.Status
)

func megabytes(mb int64) string {
	if mb >= 10*1024 {
		return fmt.Sprintf("%.0f GiB", float64(mb)/1024)
	}
	if mb >= 1024 {
		return fmt.Sprintf("%.1f GiB", float64(mb)/1024)
	}
	return fmt.Sprintf("%d MiB", mb)
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// prettyJSON renders a document as indented relaxed extended JSON
// ($oid, $date), as the mongo shell shows it.
func prettyJSON(doc bson.Raw) string {
	if len(doc) == 0 {
		return "{}"
	}
	b, err := bson.MarshalExtJSON(doc, false, false)
	if err != nil {
		return fmt.Sprintf("(cannot show as JSON: %v)", err)
	}
	var out strings.Builder
	var v json.RawMessage = b
	ind, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(b)
	}
	out.Write(ind)
	return out.String()
}

// compactJSON renders a document on one line, for lists.
func compactJSON(doc bson.Raw) string {
	if len(doc) == 0 {
		return "{}"
	}
	b, err := bson.MarshalExtJSON(doc, false, false)
	if err != nil {
		return "?"
	}
	return string(b)
}
