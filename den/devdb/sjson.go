package devdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Reading a document as FerretDB 1.24 keeps it in PostgreSQL (its package
// internal/handler/sjson), for the find path's documents whose match SQL
// decides exactly: a JSON object of the document's fields, with the
// document's schema under "$s": {"p": {field: elem}, "$k": [fields in
// order]}, where an elem is {"t": type} and, for a document, "$s" (its
// schema); for an array, "i" (its items' elems); for a binary, "s" (its
// subtype); for a regular expression, "o" (its options). A value is
// decoded as FerretDB decodes it (encoding/json into the Go type of its
// schema type; JSON null is null whatever the type), into the BSON types
// FerretDB sends them as, so that the document's BSON is byte for byte
// FerretDB's. Anything this does not know is an error: the document is
// then left to FerretDB.

// sjsonSchema is a document's schema.
type sjsonSchema struct {
	Properties map[string]*sjsonElem `json:"p"`
	Keys       []string              `json:"$k"`
}

// sjsonElem is a value's schema.
type sjsonElem struct {
	Type    string       `json:"t"`
	Schema  *sjsonSchema `json:"$s,omitempty"`
	Options *string      `json:"o,omitempty"`
	Items   []*sjsonElem `json:"i,omitempty"`
	Subtype *byte        `json:"s,omitempty"`
}

// errSjson is a document the find path does not decode itself.
var errSjson = errors.New("a document FerretDB decodes")

// sjsonDecode decodes a whole document from _jsonb's text.
func sjsonDecode(data []byte) (bson.D, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	raw, ok := fields["$s"]
	if !ok {
		return nil, fmt.Errorf("%w: no schema", errSjson)
	}
	var sch sjsonSchema
	if err := json.Unmarshal(raw, &sch); err != nil {
		return nil, err
	}
	delete(fields, "$s")
	return sjsonFields(fields, &sch)
}

// sjsonFields decodes a document's fields by its schema, in its order.
func sjsonFields(fields map[string]json.RawMessage, sch *sjsonSchema) (bson.D, error) {
	if len(fields) == 0 {
		return bson.D{}, nil
	}
	if sch == nil || len(sch.Keys) != len(fields) {
		return nil, fmt.Errorf("%w: the schema's keys are not the document's", errSjson)
	}
	out := make(bson.D, 0, len(sch.Keys))
	for _, k := range sch.Keys {
		raw, ok := fields[k]
		if !ok {
			return nil, fmt.Errorf("%w: no field %q", errSjson, k)
		}
		v, err := sjsonValue(raw, sch.Properties[k])
		if err != nil {
			return nil, err
		}
		out = append(out, bson.E{Key: k, Value: v})
	}
	return out, nil
}

// sjsonValue decodes one value by its schema.
func sjsonValue(raw json.RawMessage, e *sjsonElem) (any, error) {
	if string(raw) == "null" {
		return nil, nil
	}
	if e == nil {
		return nil, fmt.Errorf("%w: no schema", errSjson)
	}
	switch e.Type {
	case "object":
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(raw, &fields); err != nil {
			return nil, err
		}
		if e.Schema == nil {
			return nil, fmt.Errorf("%w: a document without its schema", errSjson)
		}
		return sjsonFields(fields, e.Schema)
	case "array":
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, err
		}
		if len(items) != len(e.Items) {
			return nil, fmt.Errorf("%w: an array's schema is not its items'", errSjson)
		}
		out := make(bson.A, len(items))
		for i, it := range items {
			v, err := sjsonValue(it, e.Items[i])
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case "double":
		var f float64
		err := json.Unmarshal(raw, &f)
		return f, err
	case "string":
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case "binData":
		var b []byte
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, err
		}
		if e.Subtype == nil || *e.Subtype == bson.TypeBinaryBinaryOld {
			return nil, fmt.Errorf("%w: a binary of subtype %v", errSjson, e.Subtype)
		}
		return bson.Binary{Subtype: *e.Subtype, Data: b}, nil
	case "objectId":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return bson.ObjectIDFromHex(s)
	case "bool":
		var b bool
		err := json.Unmarshal(raw, &b)
		return b, err
	case "date":
		var ms int64
		err := json.Unmarshal(raw, &ms)
		return bson.DateTime(ms), err
	case "regex":
		var p string
		if err := json.Unmarshal(raw, &p); err != nil {
			return nil, err
		}
		if e.Options == nil {
			return nil, fmt.Errorf("%w: a regular expression without options", errSjson)
		}
		return bson.Regex{Pattern: p, Options: *e.Options}, nil
	case "int":
		var n int32
		err := json.Unmarshal(raw, &n)
		return n, err
	case "long":
		var n int64
		err := json.Unmarshal(raw, &n)
		return n, err
	case "timestamp":
		var n uint64
		err := json.Unmarshal(raw, &n)
		return bson.Timestamp{T: uint32(n >> 32), I: uint32(n)}, err
	}
	return nil, fmt.Errorf("%w: type %q", errSjson, e.Type)
}

// topProjection is a projection of top-level fields only, as FerretDB
// applies it: _id first (unless left out), then the fields included, or
// all but the fields excluded, in the document's order.
type topProjection struct {
	none    bool // no projection: the whole document, _id first
	include bool
	fields  map[string]bool
	idShown bool
}

// newTopProjection reads a projection (checked by plainProjection); ok is
// false for one with dotted paths.
func newTopProjection(p bson.Raw) (topProjection, bool) {
	tp := topProjection{fields: map[string]bool{}, idShown: true}
	elems, _ := p.Elements()
	if len(elems) == 0 {
		tp.none = true
		return tp, true
	}
	first := true
	for _, e := range elems {
		if _, err := strconv.Atoi(e.Key()); err == nil || containsDot(e.Key()) {
			return topProjection{}, false
		}
		on := e.Value().Type == bson.TypeBoolean && e.Value().Boolean()
		if f, ok := e.Value().AsFloat64OK(); ok {
			on = f != 0
		}
		if e.Key() == "_id" {
			tp.idShown = on
			if len(elems) == 1 {
				tp.include = on
			}
			continue
		}
		if first {
			tp.include, first = on, false
		}
		tp.fields[e.Key()] = on
	}
	return tp, true
}

// containsDot reports whether a key is a path.
func containsDot(k string) bool {
	for i := range len(k) {
		if k[i] == '.' {
			return true
		}
	}
	return false
}

// apply projects doc.
func (tp topProjection) apply(doc bson.D) (bson.D, error) {
	out := make(bson.D, 0, len(doc))
	for _, e := range doc {
		if e.Key == "_id" && tp.idShown {
			out = append(out, e)
		}
	}
	if len(out) == 0 && tp.idShown {
		return nil, fmt.Errorf("%w: no _id", errSjson)
	}
	for _, e := range doc {
		switch {
		case e.Key == "_id":
		case tp.none:
			out = append(out, e)
		case tp.include && tp.fields[e.Key]:
			out = append(out, e)
		case !tp.include && !excluded(tp, e.Key):
			out = append(out, e)
		}
	}
	return out, nil
}

// excluded reports whether an exclusion projection names key.
func excluded(tp topProjection, key string) bool {
	on, named := tp.fields[key]
	return named && !on
}
