package config

import (
	"fmt"
	"net/url"
	"sort"
	"strings"
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
	out := map[string]any{}
	host, ok := m["mongohost"].(string)
	if !ok || strings.TrimSpace(host) == "" {
		return nil, nil, nil, fmt.Errorf("mongohost must be a string such as \"mongodb://127.0.0.1:27017\"")
	}
	db, ok := m["database"].(string)
	if !ok || db == "" {
		return nil, nil, nil, fmt.Errorf("database must be a non-empty string")
	}
	if !strings.Contains(host, "://") {
		host = "mongodb://" + host
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("mongohost %q: %w", host, err)
	}
	q := u.Query()
	if attrs, ok := m["attributes"].(map[string]any); ok {
		if ssl, ok := attrs["ssl"]; ok && ssl != false && ssl != nil {
			q.Set("tls", "true")
			if opts, ok := ssl.(map[string]any); ok {
				if ca, ok := opts["SSL_ca_file"].(string); ok {
					q.Set("tlsCAFile", ca)
				}
				if mode, ok := opts["SSL_verify_mode"].(float64); ok && mode == 0 {
					q.Set("tlsInsecure", "true")
				}
			}
		}
	}
	var runnerUser *url.Userinfo
	if auth, ok := m["auth"].(map[string]any); ok && u.User == nil {
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
	out["mongo"] = map[string]any{"uri": u.String(), "database": db}
	for _, k := range []string{"activequeues", "ignorequeues"} {
		if val, ok := m[k]; ok && val != nil {
			arr, ok := val.([]any)
			if !ok {
				return nil, nil, nil, fmt.Errorf("%s must be an array of queue ids", k)
			}
			out[k] = arr
		}
	}
	if g, ok := m["gfs"]; ok && g != nil {
		out["gfs"] = fmt.Sprint(g)
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
