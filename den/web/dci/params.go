package dci

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
)

// Request bodies. The Perl web API reads its parameters (parse_params) from
// a form body (application/x-www-form-urlencoded), from a JSON body
// (application/json), or else from the query string. A form's repeated
// field is a list (url_params_mixed). den reads the same, and compares the
// media type without its parameters: "application/json; charset=utf-8" is
// JSON, where the Perl web API, comparing the whole header, read nothing.
//
// Bodies are limited (MaxReadBody for a read, a search; MaxBody for a
// write, and MaxTasksBody where it carries tasks); a larger one is
// answered 413 and nothing is done. A read's JSON nests at most MaxDepth
// deep, with at most MaxMembers in any one object or array (so at most
// that many values in an $in, $nin or $all); a write's at most
// MaxWriteDepth. Over them: 400 saying which, and nothing is read further.
const (
	MaxReadBody   = 256 << 10
	MaxBody       = 1 << 20
	MaxTasksBody  = 64 << 20
	MaxDepth      = 20
	MaxMembers    = 1000
	MaxWriteDepth = 100
)

// params are a request's parameters: obj for an object or a form, []any
// for an array, a scalar; nil when there are none. bad is set when the
// body is not what its Content-Type says (the Perl web API then had the
// parser's message for parameters).
type params struct {
	v   any
	bad error
}

// errTooLarge is a body over its limit.
type errTooLarge struct{ limit int64 }

func (e errTooLarge) Error() string {
	return fmt.Sprintf("the request body is larger than %d bytes", e.limit)
}

// parseParams reads r's parameters, its JSON within lim; the error is
// only for a body that could not be read (too large: errTooLarge) or
// JSON over lim (*jsonLimitError).
func parseParams(w http.ResponseWriter, r *http.Request, limit int64, lim jsonLimits) (params, error) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "application/x-www-form-urlencoded", "application/json":
	default:
		if r.URL.RawQuery == "" {
			return params{}, nil
		}
		return formParams(r.URL.RawQuery), nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return params{}, errTooLarge{limit}
		}
		return params{}, fmt.Errorf("read the request body: %w", err)
	}
	if mt == "application/x-www-form-urlencoded" {
		return formParams(string(body)), nil
	}
	v, err := decodeJSON(body, lim)
	var over *jsonLimitError
	if errors.As(err, &over) {
		return params{}, err
	}
	if err != nil {
		return params{bad: fmt.Errorf("the body is not JSON: %v", err)}, nil
	}
	return params{v: v}, nil
}

// formParams reads a form: a field given once is a string, given more
// than once a list of strings. A form that cannot be read is what could be.
func formParams(s string) params {
	values, _ := url.ParseQuery(s)
	o := obj{}
	// url.ParseQuery loses the order: keep it from the text.
	seen := map[string]bool{}
	for _, pair := range splitPairs(s) {
		k, err := url.QueryUnescape(pair)
		if err != nil || seen[k] {
			continue
		}
		seen[k] = true
		vs, ok := values[k]
		if !ok {
			continue
		}
		if len(vs) == 1 {
			o = append(o, field{k, vs[0]})
		} else {
			list := make([]any, len(vs))
			for i, x := range vs {
				list[i] = x
			}
			o = append(o, field{k, list})
		}
	}
	return params{v: o}
}

// splitPairs returns the keys of a form's fields, in order.
func splitPairs(s string) []string {
	var keys []string
	for s != "" {
		var pair string
		pair, s, _ = cut(s, '&')
		if pair == "" {
			continue
		}
		k, _, _ := cut(pair, '=')
		keys = append(keys, k)
	}
	return keys
}

func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// object returns the parameters as an object; nil parameters are an
// empty one. ok is false for anything else (the Perl web API died on it:
// a 500).
func (p params) object() (obj, bool) {
	if p.bad != nil {
		return nil, false
	}
	switch v := p.v.(type) {
	case nil:
		return obj{}, true
	case obj:
		return v, true
	}
	return nil, false
}

// notObject is the message for parameters that are not an object.
func (p params) notObject() string {
	if p.bad != nil {
		return p.bad.Error()
	}
	return "the parameters must be a JSON object or a form, not " + describe(p.v)
}
