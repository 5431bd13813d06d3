package dci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The JSON the Perl web API reads and writes. Perl decodes a request into
// hashes, whose order is lost; den keeps the order written (a sort on two
// fields means what its client wrote). Answers are written as
// Cpanel::JSON::XS writes the Perl values of the MongoDB driver of
// Disbatch 4's time: an ObjectId as {"$oid": HEX}, a date as DateTime
// stringifies ("2026-01-02T03:04:05", UTC, whole seconds) unless a route
// turns it into a number, a double with its fraction (2.0, not 2), with
// "/" and non-ASCII characters as they are.

// obj is a JSON object whose order is kept.
type obj []field

type field struct {
	k string
	v any
}

// get returns the value of key k, and whether obj has it.
func (o obj) get(k string) (any, bool) {
	for _, f := range o {
		if f.k == k {
			return f.v, true
		}
	}
	return nil, false
}

// set replaces the value of k, or adds it at the end.
func (o *obj) set(k string, v any) {
	for i := range *o {
		if (*o)[i].k == k {
			(*o)[i].v = v
			return
		}
	}
	*o = append(*o, field{k, v})
}

// del removes k.
func (o *obj) del(k string) {
	for i := range *o {
		if (*o)[i].k == k {
			*o = append((*o)[:i], (*o)[i+1:]...)
			return
		}
	}
}

// perlFloat is a number Perl holds as a double: written with a fraction
// or an exponent, as Cpanel::JSON::XS writes it.
type perlFloat float64

// rawJSON is written as it is.
type rawJSON []byte

// jsonLimits bound what a request's JSON may hold: how deep objects and
// arrays nest (the outermost counts 1), and how many members one object
// or array holds (0: any number).
type jsonLimits struct {
	depth   int
	members int
}

// The limits of a read's JSON (a search: MaxDepth, MaxMembers) and of a
// write's (MaxWriteDepth, what MongoDB stores; tasks come in arrays of
// any length).
var (
	readJSON  = jsonLimits{depth: MaxDepth, members: MaxMembers}
	writeJSON = jsonLimits{depth: MaxWriteDepth}
)

// jsonLimitError is JSON over one of its limits: the message says which.
type jsonLimitError struct{ msg string }

func (e *jsonLimitError) Error() string { return e.msg }

// decodeJSON reads one JSON value, keeping the order of objects (obj);
// numbers are json.Number, and the rest as encoding/json has them. JSON
// over lim stops the reading at once with a *jsonLimitError.
func decodeJSON(data []byte, lim jsonLimits) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d, lim, 1, "")
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("garbage after the JSON value")
	}
	return v, nil
}

// decodeValue reads a value at depth (1: the outermost), the member key
// of its object ("" for none), for the limits' messages.
func decodeValue(d *json.Decoder, lim jsonLimits, depth int, key string) (any, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	delim, ok := t.(json.Delim)
	if !ok {
		return t, nil
	}
	if depth > lim.depth {
		return nil, &jsonLimitError{fmt.Sprintf("the JSON nests objects and arrays more than %d deep (the outermost counts 1): at most %d", lim.depth, lim.depth)}
	}
	full := func(n int) error {
		if lim.members == 0 || n < lim.members {
			return nil
		}
		what := "an array"
		if delim == '{' {
			what = "an object"
		}
		if key != "" {
			what = fmt.Sprintf("%s (%s)", strconv.Quote(key), what[3:])
		}
		return &jsonLimitError{fmt.Sprintf("%s holds more than %d values: an object or array of a search holds at most %d", what, lim.members, lim.members)}
	}
	switch delim {
	case '{':
		o := obj{}
		for d.More() {
			if err := full(len(o)); err != nil {
				return nil, err
			}
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(d, lim, depth+1, k.(string))
			if err != nil {
				return nil, err
			}
			o.set(k.(string), v)
		}
		_, err := d.Token()
		return o, err
	case '[':
		a := []any{}
		for d.More() {
			if err := full(len(a)); err != nil {
				return nil, err
			}
			v, err := decodeValue(d, lim, depth+1, key)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token()
		return a, err
	}
	return nil, fmt.Errorf("unexpected %v", delim)
}

// encodeJSON writes v compactly, or, with pretty, as Cpanel::JSON::XS's
// pretty does (3 spaces, " : ", a newline at the end).
func encodeJSON(v any, pretty bool) []byte {
	var b bytes.Buffer
	w := writer{b: &b, pretty: pretty}
	w.value(v, 0)
	if pretty {
		b.WriteByte('\n')
	}
	return b.Bytes()
}

type writer struct {
	b      *bytes.Buffer
	pretty bool
}

func (w writer) indent(n int) {
	if w.pretty {
		w.b.WriteByte('\n')
		w.b.WriteString(strings.Repeat("   ", n))
	}
}

func (w writer) value(v any, depth int) {
	switch v := v.(type) {
	case nil:
		w.b.WriteString("null")
	case obj:
		if len(v) == 0 {
			w.b.WriteString("{}")
			return
		}
		w.b.WriteByte('{')
		for i, f := range v {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.indent(depth + 1)
			writeString(w.b, f.k)
			if w.pretty {
				w.b.WriteString(" : ")
			} else {
				w.b.WriteByte(':')
			}
			w.value(f.v, depth+1)
		}
		w.indent(depth)
		w.b.WriteByte('}')
	case []any:
		if len(v) == 0 {
			w.b.WriteString("[]")
			return
		}
		w.b.WriteByte('[')
		for i, x := range v {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.indent(depth + 1)
			w.value(x, depth+1)
		}
		w.indent(depth)
		w.b.WriteByte(']')
	case string:
		writeString(w.b, v)
	case bool:
		w.b.WriteString(strconv.FormatBool(v))
	case int:
		w.b.WriteString(strconv.Itoa(v))
	case int64:
		w.b.WriteString(strconv.FormatInt(v, 10))
	case json.Number:
		w.b.WriteString(v.String())
	case perlFloat:
		w.b.WriteString(formatFloat(float64(v)))
	case rawJSON:
		w.b.Write(v)
	case bson.RawValue:
		w.value(fromBSON(v), depth)
	default:
		writeString(w.b, fmt.Sprint(v))
	}
}

// formatFloat writes a double as Perl prints one (15 significant
// digits), with ".0" on a whole number, as Cpanel::JSON::XS does; NaN and
// the infinities, which JSON has no word for, as null.
func formatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "null"
	}
	s := strconv.FormatFloat(f, 'g', 15, 64)
	if !strings.ContainsAny(s, ".eEn") {
		s += ".0"
	}
	return s
}

// writeString escapes as Cpanel::JSON::XS does in utf8 mode: the quote,
// the backslash and control characters; bytes that are not UTF-8 become
// U+FFFD.
func writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20:
			fmt.Fprintf(b, `\u%04x`, r)
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// perlDate is a date as a DateTime stringifies: UTC, to the second.
func perlDate(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05") }

// oid is an ObjectId as the Perl web API writes it.
func oid(id bson.ObjectID) obj { return obj{{"$oid", id.Hex()}} }

// fromBSON is a BSON value as the Perl web API writes it. Types Perl
// Disbatch never stored (binary, regular expressions, decimals, ...) are
// written as MongoDB's relaxed extended JSON has them.
func fromBSON(v bson.RawValue) any {
	switch v.Type {
	case bson.TypeNull, bson.TypeUndefined, 0:
		return nil
	case bson.TypeObjectID:
		return oid(v.ObjectID())
	case bson.TypeDateTime:
		return perlDate(v.Time())
	case bson.TypeString:
		return v.StringValue()
	case bson.TypeInt32:
		return int64(v.Int32())
	case bson.TypeInt64:
		return v.Int64()
	case bson.TypeDouble:
		return perlFloat(v.Double())
	case bson.TypeBoolean:
		return v.Boolean()
	case bson.TypeEmbeddedDocument:
		return docToObj(v.Document())
	case bson.TypeArray:
		vals, _ := v.Array().Values()
		out := make([]any, 0, len(vals))
		for _, x := range vals {
			out = append(out, fromBSON(x))
		}
		return out
	}
	ext, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		return nil
	}
	var wrapped struct {
		V json.RawMessage `json:"v"`
	}
	if json.Unmarshal(ext, &wrapped) != nil {
		return nil
	}
	return rawJSON(wrapped.V)
}

// docToObj is a document as the Perl web API writes it, fields in order.
func docToObj(doc bson.Raw) obj {
	elems, _ := doc.Elements()
	out := make(obj, 0, len(elems))
	for _, e := range elems {
		out = append(out, field{e.Key(), fromBSON(e.Value())})
	}
	return out
}

// errBadOID is the error toBSON gives for an $oid that is no id.
type errBadOID struct{ value any }

func (e errBadOID) Error() string {
	return fmt.Sprintf("%s is not an ObjectId: want 24 hexadecimal digits", describe(e.value))
}

// toBSON turns a decoded JSON value into what the Perl web API would have
// sent MongoDB: an object whose keys include $oid is that ObjectId (its
// other keys ignored, as Disbatch's deserialize_oid does), a whole number
// an int32 or int64, any other number a double; anything else (a date a
// search filter's millisecond dates became) as it is.
func toBSON(v any) (any, error) {
	switch v := v.(type) {
	case obj:
		if id, ok := v.get("$oid"); ok {
			s, _ := id.(string)
			oid, err := bson.ObjectIDFromHex(s)
			if err != nil {
				return nil, errBadOID{id}
			}
			return oid, nil
		}
		d := make(bson.D, 0, len(v))
		for _, f := range v {
			x, err := toBSON(f.v)
			if err != nil {
				return nil, err
			}
			d = append(d, bson.E{Key: f.k, Value: x})
		}
		return d, nil
	case []any:
		a := make(bson.A, 0, len(v))
		for _, x := range v {
			y, err := toBSON(x)
			if err != nil {
				return nil, err
			}
			a = append(a, y)
		}
		return a, nil
	case json.Number:
		if n, err := v.Int64(); err == nil {
			if n >= math.MinInt32 && n <= math.MaxInt32 {
				return int32(n), nil
			}
			return n, nil
		}
		f, err := v.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", v, err)
		}
		return f, nil
	}
	return v, nil
}

// describe is a value as messages show it.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return strconv.Quote(v)
	case obj:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprint(v)
}

// number reads a JSON number or a string of one as Perl would compare it;
// ok is false for anything else.
func number(v any) (float64, bool) {
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		return f, err == nil
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		return f, err == nil
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// scalarText is a scalar as Perl stringifies it (for the checks the Perl
// web API makes with regular expressions): ok is false for an object, an
// array or null.
func scalarText(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case json.Number:
		return v.String(), true
	case bool:
		if v {
			return "1", true
		}
		return "0", true
	}
	return "", false
}
