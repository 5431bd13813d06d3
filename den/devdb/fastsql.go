package devdb

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// How the find path (fastfind.go) turns a filter into SQL that holds for
// a superset of the documents it matches: never leaves out a match, may
// let through documents FerretDB then rejects.
//
// FerretDB keeps a document as JSON in _jsonb: an ObjectId as its hex
// string, a date as its milliseconds, a number as a number, a binary as
// base64; and the BSON type of each value in the document's schema, $s.
// So, for a field's value E in _jsonb:
//
//   - an equality to a value v of those types matches where E = v as
//     jsonb (also a string that spells an ObjectId's hex, or a number
//     that a date's milliseconds are: more, never less), or where E is
//     an array (which matches when it holds v);
//   - a range ($gt, $gte, $lt, $lte) matches where the jsonb comparison
//     holds (jsonb orders types null < string < number < boolean < array
//     < object, so a range on numbers lets through booleans, arrays and
//     objects, never leaves out a number), or where E is an array;
//   - a path a.b also matches where a is an array (of documents with b).
//
// Numbers are compared in SQL only when below 2^53 in magnitude, where
// jsonb's exact decimals order them as BSON does (FerretDB writes a
// double in its shortest decimal form, which keeps its order among
// doubles). $exists is whether the path's key is there (SQL NULL from ->
// where it is not), $type the jsonb type FerretDB keeps the alias in.
// An equality to null matches where the path's key is missing (SQL NULL
// from ->) or holds null, or goes through an array. Anything else a
// filter may hold that the path accepts ($ne, $nin, $not, larger
// numbers) adds nothing to the SQL: FerretDB alone decides it.

// maxSafe is 2^53: integers below it in magnitude are exact doubles.
const maxSafe = 1 << 53

// sqlArgs collects a statement's parameters.
type sqlArgs struct{ args []any }

// add adds a parameter and returns its placeholder.
func (a *sqlArgs) add(v any) string {
	a.args = append(a.args, v)
	return "$" + strconv.Itoa(len(a.args))
}

// jsonbLiteral is v as FerretDB writes it in _jsonb, for the values the
// SQL compares; ok is false for any other value.
func jsonbLiteral(v bson.RawValue) (string, bool) {
	switch v.Type {
	case bson.TypeObjectID:
		return `"` + v.ObjectID().Hex() + `"`, true
	case bson.TypeString:
		s := v.StringValue()
		if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
			return "", false // PostgreSQL cannot hold it; FerretDB stores it otherwise
		}
		b, err := json.Marshal(s)
		return string(b), err == nil
	case bson.TypeInt32:
		return strconv.Itoa(int(v.Int32())), true
	case bson.TypeInt64:
		if n := v.Int64(); n < maxSafe && n > -maxSafe {
			return strconv.FormatInt(n, 10), true
		}
	case bson.TypeDouble:
		if f := v.Double(); !math.IsNaN(f) && math.Abs(f) < maxSafe {
			return strconv.FormatFloat(f, 'g', -1, 64), true
		}
	case bson.TypeBoolean:
		return strconv.FormatBool(v.Boolean()), true
	case bson.TypeDateTime:
		if ms := v.DateTime(); ms < maxSafe && ms > -maxSafe {
			return strconv.FormatInt(ms, 10), true
		}
	}
	return "", false
}

// scalarValue reports whether v is of a type the fast paths accept in a
// filter: a scalar FerretDB stores, or null.
func scalarValue(v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeObjectID, bson.TypeString, bson.TypeInt32, bson.TypeInt64, bson.TypeDouble,
		bson.TypeBoolean, bson.TypeDateTime, bson.TypeNull:
		return true
	}
	return false
}

// fieldPath splits a filter's key into its path; ok is false for a key
// that is no plain path (empty parts, operators).
func fieldPath(key string) ([]string, bool) {
	parts := strings.Split(key, ".")
	for _, p := range parts {
		if p == "" || strings.HasPrefix(p, "$") || strings.ContainsRune(p, 0) {
			return nil, false
		}
	}
	return parts, true
}

// numeric reports whether a path's part is an array index.
func numeric(part string) bool {
	for _, r := range part {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// sqlPath is the SQL expression of a path's value in _jsonb, and the
// condition that it, or a document it goes through, is an array.
func sqlPath(path []string) (expr, arrays string) {
	cur := "_jsonb"
	var conds []string
	for _, p := range path {
		cur += " -> " + quoteLiteral(p)
		conds = append(conds, "jsonb_typeof("+cur+") = 'array'")
	}
	return "(" + cur + ")", "(" + strings.Join(conds, " OR ") + ")"
}

// condition is one operator of a filter on a path, with its operand.
type condition struct {
	op string // $eq, $in, $gt, $gte, $lt, $lte, $ne, $nin, $exists, $type
	v  bson.RawValue
}

// pathConditions reads a filter's value for one path: a scalar (an
// equality) or a document of operators. Operators and values the fast
// paths do not know are a forward.
func pathConditions(v bson.RawValue) ([]condition, error) {
	if v.Type != bson.TypeEmbeddedDocument {
		if !scalarValue(v) {
			return nil, forward("a value of type %s", v.Type)
		}
		return []condition{{"$eq", v}}, nil
	}
	elems, err := v.Document().Elements()
	if err != nil || len(elems) == 0 {
		return nil, forward("an equality to a document")
	}
	var out []condition
	for _, e := range elems {
		op, arg := e.Key(), e.Value()
		switch op {
		case "$eq", "$ne", "$gt", "$gte", "$lt", "$lte":
			if !scalarValue(arg) {
				return nil, forward("%s of type %s", op, arg.Type)
			}
		case "$in", "$nin":
			arr, ok := arg.ArrayOK()
			if !ok {
				return nil, forward("%s of type %s", op, arg.Type)
			}
			vals, err := arr.Values()
			if err != nil || len(vals) > 1000 {
				return nil, forward("%s of %d values", op, len(vals))
			}
			for _, x := range vals {
				if !scalarValue(x) {
					return nil, forward("%s holding a value of type %s", op, x.Type)
				}
			}
		case "$exists":
			if arg.Type != bson.TypeBoolean {
				return nil, forward("$exists of type %s", arg.Type)
			}
		case "$type":
			alias, _ := arg.StringValueOK()
			if _, ok := jsonbTypes[alias]; !ok {
				return nil, forward("$type %s", arg)
			}
		case "$not":
			// Adds nothing to the SQL: FerretDB decides it on the
			// candidates the other conditions leave.
			if arg.Type != bson.TypeEmbeddedDocument && arg.Type != bson.TypeRegex {
				return nil, forward("$not of type %s", arg.Type)
			}
		default:
			return nil, forward("operator %s", op)
		}
		out = append(out, condition{op, arg})
	}
	return out, nil
}

// inLiterals are the literals of an $in, or ok false when one cannot be
// compared in SQL (null, a large number).
func inLiterals(v bson.RawValue) ([]string, bool) {
	vals, _ := v.Array().Values()
	out := make([]string, 0, len(vals))
	for _, x := range vals {
		lit, ok := jsonbLiteral(x)
		if !ok {
			return nil, false
		}
		out = append(out, lit)
	}
	return out, true
}

// jsonbTypes are the $type aliases the fast paths read, and the jsonb
// type FerretDB keeps each in (an ObjectId as its hex string, a date as
// its milliseconds): a superset, which FerretDB narrows. Not "double"
// nor "number": an infinite double has no jsonb number to be kept as.
var jsonbTypes = map[string]string{
	"string": "string", "objectId": "string",
	"int": "number", "long": "number", "date": "number",
	"bool": "boolean", "null": "null",
}

// sqlOps are the SQL operators of the ranges.
var sqlOps = map[string]string{"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}

// conditionSQL is the SQL of the conditions on a path that SQL compares,
// "" when none does (then every document passes).
func conditionSQL(expr string, conds []condition, a *sqlArgs) string {
	var parts []string
	for _, c := range conds {
		switch c.op {
		case "$eq":
			if c.v.Type == bson.TypeNull {
				// Missing (SQL NULL from ->, also where what would hold
				// it is no document) or null; an array holding null is
				// the caller's arrays.
				parts = append(parts, "("+expr+" IS NULL OR "+expr+" = 'null'::jsonb)")
			} else if lit, ok := jsonbLiteral(c.v); ok {
				parts = append(parts, expr+" = "+a.add(lit)+"::jsonb")
			}
		case "$in":
			if lits, ok := inLiterals(c.v); ok {
				parts = append(parts, expr+" = ANY("+a.add(lits)+"::text[]::jsonb[])")
			}
		case "$gt", "$gte", "$lt", "$lte":
			if lit, ok := jsonbLiteral(c.v); ok {
				parts = append(parts, expr+" "+sqlOps[c.op]+" "+a.add(lit)+"::jsonb")
			}
		case "$type":
			parts = append(parts, "jsonb_typeof("+expr+") = "+quoteLiteral(jsonbTypes[c.v.StringValue()]))
		case "$exists":
			// -> gives SQL NULL where the key is missing, and where what
			// holds it is no document (an array: the caller's arrays).
			if c.v.Boolean() {
				parts = append(parts, expr+" IS NOT NULL")
			} else {
				parts = append(parts, expr+" IS NULL")
			}
		}
	}
	return strings.Join(parts, " AND ")
}

// superset is the SQL that holds for every document filter matches
// ("" for all), and whether the filter requires an ObjectId _id (then no
// document of another _id type matches).
func superset(filter bson.Raw, a *sqlArgs) (sql string, idTyped bool, err error) {
	elems, err := filter.Elements()
	if err != nil {
		return "", false, forward("unreadable filter")
	}
	var parts []string
	for _, e := range elems {
		s, typed, err := clauseSQL(e, a)
		if err != nil {
			return "", false, err
		}
		idTyped = idTyped || typed
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, " AND "), idTyped, nil
}

// clauseSQL is superset's for one of a filter's elements.
func clauseSQL(e bson.RawElement, a *sqlArgs) (string, bool, error) {
	key := e.Key()
	switch key {
	case "$and", "$or":
		arr, ok := e.Value().ArrayOK()
		if !ok {
			return "", false, forward("%s of type %s", key, e.Value().Type)
		}
		vals, err := arr.Values()
		if err != nil || len(vals) == 0 {
			return "", false, forward("empty %s", key)
		}
		var parts []string
		typed, all := key == "$or", false
		mark := len(a.args)
		for _, v := range vals {
			sub, ok := v.DocumentOK()
			if !ok {
				return "", false, forward("%s of a %s", key, v.Type)
			}
			s, t, err := superset(sub, a)
			if err != nil {
				return "", false, err
			}
			if key == "$and" {
				typed = typed || t
				if s != "" {
					parts = append(parts, s)
				}
				continue
			}
			typed = typed && t
			if s == "" {
				all = true // a branch any document passes
			}
			parts = append(parts, "("+s+")")
		}
		if all || len(parts) == 0 {
			// Nothing of it goes into the SQL: neither do its parameters
			// (an $or of {f: null} and {f: {$lte: d}} left d's, and PostgreSQL
			// refused the statement: "expected 2 arguments, got 3").
			a.args = a.args[:mark]
			return "", typed, nil
		}
		sep := " AND "
		if key == "$or" {
			sep = " OR "
		}
		return "(" + strings.Join(parts, sep) + ")", typed, nil
	}
	path, ok := fieldPath(key)
	if !ok {
		return "", false, forward("key %q", key)
	}
	conds, err := pathConditions(e.Value())
	if err != nil {
		return "", false, err
	}
	if key == "_id" {
		return idSQL(conds, a)
	}
	if slices.ContainsFunc(path, numeric) {
		return "", false, nil // an array's element: FerretDB decides
	}
	expr, arrays := sqlPath(path)
	s := conditionSQL(expr, conds, a)
	if s == "" {
		return "", false, nil
	}
	return "((" + s + ") OR " + arrays + ")", false, nil
}

// idSQL is the SQL of conditions on _id: with ObjectIds only, exact for
// the documents whose _id is an ObjectId (an _id is never an array).
func idSQL(conds []condition, a *sqlArgs) (string, bool, error) {
	for _, c := range conds {
		vals := []bson.RawValue{c.v}
		if c.op == "$in" || c.op == "$nin" {
			vals, _ = c.v.Array().Values()
		}
		for _, v := range vals {
			if v.Type != bson.TypeObjectID || c.op == "$exists" {
				return "", false, forward("_id %s of type %s", c.op, v.Type)
			}
		}
	}
	s := conditionSQL(sqlID, conds, a)
	typed := s != ""
	for _, c := range conds {
		typed = typed && c.op != "$ne" && c.op != "$nin"
	}
	if !typed {
		return s, false, nil
	}
	return s, true, nil
}

// expansion is an equality or $in on a field of a list index, whose
// values the find path reads one branch each, in _id order from the index.
type expansion struct {
	field string
	lits  []string
}

// maxBranches bounds the branches of a find's SQL: the product of its
// expansions' values.
const maxBranches = 64

// expansions picks, among a filter's top-level elements, the equalities
// and $ins on fields of spec, at most maxBranches combinations of them;
// the others are left to superset.
func expansions(filter bson.Raw, spec fastSpec) (picked []expansion, rest []bson.RawElement, err error) {
	elems, err := filter.Elements()
	if err != nil {
		return nil, nil, forward("unreadable filter")
	}
	var cands []expansion
	var candElems []bson.RawElement
	for _, e := range elems {
		if ex, ok := expansionOf(e, spec); ok {
			cands = append(cands, ex)
			candElems = append(candElems, e)
			continue
		}
		rest = append(rest, e)
	}
	// The fewest values first: they narrow best for their branches.
	order := make([]int, len(cands))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(x, y int) int { return len(cands[x].lits) - len(cands[y].lits) })
	product := 1
	for _, i := range order {
		if product*len(cands[i].lits) > maxBranches {
			rest = append(rest, candElems[i])
			continue
		}
		product *= len(cands[i].lits)
		picked = append(picked, cands[i])
	}
	return picked, rest, nil
}

// expansionOf reads e as an expansion on a field of spec.
func expansionOf(e bson.RawElement, spec fastSpec) (expansion, bool) {
	if !slices.Contains(spec.fields, e.Key()) {
		return expansion{}, false
	}
	conds, err := pathConditions(e.Value())
	if err != nil || len(conds) != 1 {
		return expansion{}, false
	}
	switch c := conds[0]; c.op {
	case "$eq":
		if lit, ok := jsonbLiteral(c.v); ok {
			return expansion{e.Key(), []string{lit}}, true
		}
	case "$in":
		if lits, ok := inLiterals(c.v); ok && len(lits) > 0 {
			return expansion{e.Key(), dedupe(lits)}, true
		}
	}
	return expansion{}, false
}

// dedupe returns lits without repeats, in order.
func dedupe(lits []string) []string {
	var out []string
	for _, l := range lits {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out
}

// combinations are every choice of one value of each expansion.
func combinations(ex []expansion) [][]string {
	out := [][]string{nil}
	for _, x := range ex {
		var next [][]string
		for _, prefix := range out {
			for _, l := range x.lits {
				next = append(next, append(slices.Clone(prefix), l))
			}
		}
		out = next
	}
	return out
}

// andSQL joins conditions with AND, "TRUE" for none.
func andSQL(parts ...string) string {
	var keep []string
	for _, p := range parts {
		if p != "" {
			keep = append(keep, p)
		}
	}
	if len(keep) == 0 {
		return "TRUE"
	}
	return strings.Join(keep, " AND ")
}

// Which candidates SQL decides exactly. A condition on a path holds
// exactly where the path's value is a scalar of the condition's value's
// type bracket (FerretDB's schema says the type) and the jsonb comparison
// holds: then the document matches, and the find path reads it from
// _jsonb itself (sjson.go) instead of asking FerretDB. exactSQL is that
// condition for a filter ("FALSE" where it has none, as for null, $ne,
// $nin, $exists and values SQL does not compare): a document it holds for
// matches; one it does not hold for, among the superset, FerretDB decides.

// sqlType is the SQL expression of the BSON type FerretDB's schema gives a
// path's value (null for an array's element, or a missing field).
func sqlType(path []string) string {
	parts := []string{"'$s'", "'p'"}
	for i, p := range path {
		if i > 0 {
			parts = append(parts, "'$s'", "'p'")
		}
		parts = append(parts, quoteLiteral(p))
	}
	return "(_jsonb #>> ARRAY[" + strings.Join(append(parts, "'t'"), ", ") + "])"
}

// bracket is the SQL list of FerretDB's types a value compares with: its
// BSON type bracket.
func bracket(v bson.RawValue) string {
	switch v.Type {
	case bson.TypeObjectID:
		return "('objectId')"
	case bson.TypeString:
		return "('string')"
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		return "('int', 'long', 'double')"
	case bson.TypeBoolean:
		return "('bool')"
	case bson.TypeDateTime:
		return "('date')"
	}
	return ""
}

// andOf and orOf join exact conditions, "TRUE" and "FALSE" folded.
func andOf(parts []string) string { return joinFolded(parts, " AND ", "TRUE", "FALSE") }
func orOf(parts []string) string  { return joinFolded(parts, " OR ", "FALSE", "TRUE") }

func joinFolded(parts []string, sep, unit, zero string) string {
	var keep []string
	for _, p := range parts {
		switch p {
		case zero:
			return zero
		case unit:
		default:
			keep = append(keep, "("+p+")")
		}
	}
	if len(keep) == 0 {
		return unit
	}
	return strings.Join(keep, sep)
}

// exactSQL is the condition under which a candidate of filter (checked by
// superset) surely matches. Its values are literals (quoted), not
// parameters: a part folded away leaves nothing unused.
func exactSQL(filter bson.Raw) string {
	elems, _ := filter.Elements()
	var parts []string
	for _, e := range elems {
		switch key := e.Key(); key {
		case "$and", "$or":
			vals, _ := e.Value().Array().Values()
			var subs []string
			for _, v := range vals {
				subs = append(subs, exactSQL(v.Document()))
			}
			if key == "$and" {
				parts = append(parts, andOf(subs))
			} else {
				parts = append(parts, orOf(subs))
			}
		default:
			path, _ := fieldPath(key)
			conds, _ := pathConditions(e.Value())
			parts = append(parts, exactConditions(path, conds))
		}
	}
	return andOf(parts)
}

// exactConditions is exactSQL's for the conditions on one path.
func exactConditions(path []string, conds []condition) string {
	if slices.ContainsFunc(path, numeric) {
		return "FALSE"
	}
	expr, _ := sqlPath(path)
	typ := sqlType(path)
	if len(path) == 1 && path[0] == "_id" {
		typ = "" // the candidates are the ObjectIds
	}
	is := func(v bson.RawValue) string {
		if typ == "" {
			return ""
		}
		return " AND " + typ + " IN " + bracket(v)
	}
	var parts []string
	for _, c := range conds {
		switch c.op {
		case "$eq", "$gt", "$gte", "$lt", "$lte":
			lit, ok := jsonbLiteral(c.v)
			if !ok {
				return "FALSE"
			}
			op := sqlOps[c.op]
			if op == "" {
				op = "="
			}
			parts = append(parts, expr+" "+op+" "+quoteLiteral(lit)+"::jsonb"+is(c.v))
		case "$in":
			vals, _ := c.v.Array().Values()
			byBracket := map[string][]string{}
			var brackets []string
			for _, v := range vals {
				lit, ok := jsonbLiteral(v)
				if !ok {
					return "FALSE"
				}
				b := bracket(v)
				if byBracket[b] == nil {
					brackets = append(brackets, b)
				}
				byBracket[b] = append(byBracket[b], lit)
			}
			var alts []string
			for _, b := range brackets {
				quoted := make([]string, len(byBracket[b]))
				for i, lit := range byBracket[b] {
					quoted[i] = quoteLiteral(lit)
				}
				cond := expr + " = ANY(ARRAY[" + strings.Join(quoted, ", ") + "]::jsonb[])"
				if typ != "" {
					cond += " AND " + typ + " IN " + b
				}
				alts = append(alts, cond)
			}
			parts = append(parts, orOf(alts))
		case "$exists":
			if len(path) != 1 {
				return "FALSE" // a path through an array may hold it
			}
			if c.v.Boolean() {
				parts = append(parts, expr+" IS NOT NULL")
			} else {
				parts = append(parts, expr+" IS NULL")
			}
		default:
			return "FALSE"
		}
	}
	return andOf(parts)
}
