package config

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// disbatchIgnored are the keys of a Disbatch config.json that only the Perl
// programs use; den accepts and ignores them.
var disbatchIgnored = map[string]bool{
	"plugins": true, "task_runner": true, "log4perl": true, "web_root": true,
	"monitoring": true, "balance": true, "web_extensions": true, "quiet": true,
	"testing": true, "default_config": true, "dashboard": true, "pre_hook": true,
	"node_increase": true, "queue_increase": true, "views_dir": true, "label": true,
}

// fromDisbatch translates a Disbatch config.json into den's keys. It
// returns the credentials task runners should use (Disbatch gives them a
// MongoDB user of their own) when the file has them, and the keys it does not
// know: Perl plugins may keep settings of their own in the file, so those
// are warnings, not errors.
func fromDisbatch(m map[string]any) (map[string]any, *url.Userinfo, []string, error) {
	host, ok := m["mongohost"].(string)
	if !ok || strings.TrimSpace(host) == "" {
		return nil, nil, nil, fmt.Errorf("mongohost must be a string such as \"mongodb://127.0.0.1:27017\", not %s", describe(m["mongohost"]))
	}
	db, ok := m["database"].(string)
	if !ok || db == "" {
		return nil, nil, nil, fmt.Errorf("database must be a non-empty string, not %s", describe(m["database"]))
	}
	uri, runnerUser, err := disbatchURI(m, host, db)
	if err != nil {
		return nil, nil, nil, err
	}
	out := map[string]any{"mongo": map[string]any{"uri": uri, "database": db}}
	for _, k := range []string{"activequeues", "ignorequeues"} {
		if val, ok := m[k]; ok && val != nil {
			arr, ok := val.([]any)
			if !ok {
				return nil, nil, nil, fmt.Errorf("%s must be an array of queue ids, not %s", k, describe(val))
			}
			for i, e := range arr {
				if _, ok := e.(string); !ok {
					return nil, nil, nil, fmt.Errorf("%s[%d] must be a queue id or name (a string), not %s", k, i, describe(e))
				}
			}
			out[k] = arr
		}
	}
	// plugins lists the plugins of the Perl nodes; Disbatch's web API
	// accepted queues of those. den web's takes them as web.dci_plugins.
	if arr, ok := m["plugins"].([]any); ok {
		var names []any
		for _, e := range arr {
			if name, ok := e.(string); ok && name != "" {
				names = append(names, name)
			}
		}
		if len(names) > 0 {
			out["web"] = map[string]any{"dci_plugins": names}
		}
	}
	switch g := m["gfs"].(type) {
	case nil:
	case string, bool, float64:
		out["gfs"] = fmt.Sprint(g)
	default:
		return nil, nil, nil, fmt.Errorf("gfs must be true, false or \"auto\", not %s", describe(g))
	}
	var unknown []string
	for k := range m {
		switch {
		case k == "mongohost" || k == "database" || k == "attributes" || k == "auth" ||
			k == "activequeues" || k == "ignorequeues" || k == "gfs" || disbatchIgnored[k]:
		default:
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	return out, runnerUser, unknown, nil
}

// disbatchURI is the MongoDB URI of a Disbatch file's mongohost (a URI, or
// host:port), with its TLS options (attributes.ssl) and the node's
// credentials (auth.disbatchd) in it, and the task runners' credentials
// (auth.task_runner), when mongohost names no user of its own.
func disbatchURI(m map[string]any, host, db string) (string, *url.Userinfo, error) {
	if !strings.Contains(host, "://") {
		host = "mongodb://" + host
	}
	u, err := url.Parse(host)
	if err != nil {
		return "", nil, fmt.Errorf("mongohost %q: %w", redact(host), err)
	}
	q := u.Query()
	attrs, err := object(m, "attributes", `{"ssl": {"SSL_ca_file": "/etc/ssl/certs/ca-bundle.crt"}}`)
	if err != nil {
		return "", nil, err
	}
	if err := disbatchTLS(attrs["ssl"], q); err != nil {
		return "", nil, err
	}
	// auth maps Disbatch's programs to their MongoDB passwords. The values
	// are secrets: errors say what type they are, never what they hold.
	auth, err := object(m, "auth", `{"disbatchd": "PASSWORD", "task_runner": "PASSWORD"}`)
	if err != nil {
		return "", nil, fmt.Errorf("auth must be an object of MongoDB passwords by user, such as {\"disbatchd\": \"PASSWORD\", \"task_runner\": \"PASSWORD\"}, not %s", kind(m["auth"]))
	}
	for _, user := range sortedKeys(auth) {
		if _, ok := auth[user].(string); !ok && auth[user] != nil {
			return "", nil, fmt.Errorf("auth.%s must be a password (a string), not %s", user, kind(auth[user]))
		}
	}
	var runnerUser *url.Userinfo
	if u.User == nil {
		if pw, ok := auth["disbatchd"].(string); ok {
			u.User = url.UserPassword("disbatchd", pw)
			q.Set("authSource", db)
		}
		if pw, ok := auth["task_runner"].(string); ok {
			runnerUser = url.UserPassword("task_runner", pw)
			q.Set("authSource", db)
		}
	}
	u.RawQuery = q.Encode()
	if u.Path == "" {
		u.Path = "/"
	}
	return u.String(), runnerUser, nil
}

// disbatchTLS sets the URI options of attributes.ssl: true, false, or an
// object of Perl's SSL options.
func disbatchTLS(ssl any, q url.Values) error {
	switch ssl.(type) {
	case nil, bool, float64, map[string]any:
	default:
		return fmt.Errorf("attributes.ssl must be true, false or an object of SSL options such as {\"SSL_ca_file\": \"/etc/ssl/certs/ca-bundle.crt\"}, not %s", describe(ssl))
	}
	// Perl's truth: false, null and 0 leave TLS off.
	if ssl == nil || ssl == false || ssl == 0.0 {
		return nil
	}
	q.Set("tls", "true")
	opts, _ := ssl.(map[string]any)
	switch ca := opts["SSL_ca_file"].(type) {
	case nil:
	case string:
		q.Set("tlsCAFile", ca)
	default:
		return fmt.Errorf("attributes.ssl.SSL_ca_file must be a file name (a string), not %s", describe(ca))
	}
	switch mode := opts["SSL_verify_mode"].(type) {
	case nil:
	case float64:
		if mode == 0 {
			q.Set("tlsInsecure", "true")
		}
	default:
		return fmt.Errorf("attributes.ssl.SSL_verify_mode must be a number (0: no verification), not %s", describe(mode))
	}
	return nil
}

// object reads key of m: an object, or nothing (absent or null). example
// shows what the key should hold.
func object(m map[string]any, key, example string) (map[string]any, error) {
	switch x := m[key].(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return x, nil
	default:
		return nil, fmt.Errorf("%s must be an object such as %s, not %s", key, example, describe(x))
	}
}

// describe writes a JSON value for an error: the value, shortened, with
// its JSON type. Text is quoted with its control characters escaped.
func describe(x any) string {
	if x == nil {
		return "null"
	}
	if v, ok := x.(string); ok {
		return strconv.Quote(shorten(v)) + " (a string)"
	}
	b, err := json.Marshal(x)
	if err != nil {
		b = []byte(fmt.Sprint(x))
	}
	var out strings.Builder
	for _, r := range shorten(string(b)) {
		if unicode.IsPrint(r) {
			out.WriteRune(r)
		} else {
			fmt.Fprintf(&out, "\\u%04x", r)
		}
	}
	return out.String() + " (" + kind(x) + ")"
}

// kind is a JSON value's type, with its article: "a string".
func kind(x any) string {
	switch x.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case float64, int, int64, uint64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("a %T", x)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
