package devdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// The count path: counts answered from the tally (pgfast.go), which holds
// how many documents hold each combination of the values of a few fields
// (a task's queue, status and node), kept by triggers in the same
// transaction as every write.
//
// It serves, on a collection of fastSpecs:
//
//   - count, with a query, skip and limit;
//   - aggregate with the pipeline [{$match}?, {$group}] where $group is
//     {_id: "$f" | {name: "$f", ...} | a constant, name: {$sum: 1}}, f
//     being fields of the tally; and [{$match}?, {$skip}?, {$limit}?,
//     {$group: {_id: <a constant>, n: {$sum: 1}}}], the driver's
//     countDocuments;
//
// when the filter is on the tally's fields only, with the operators of
// pathConditions, $and, $or and $nor, which the path decides exactly on
// each combination of values. A combination holding a value the tally
// does not keep (an array, a document, a long string) in a field the
// command reads, a group whose documents hold the same number as
// different types (FerretDB would name the group after whichever it
// read first), and anything else, is forwarded. An aggregate of these
// shapes whose filter the tally cannot decide is answered from its
// matches when they are few (fastgroup.go).

// tallyValue is a field's value in one combination of the tally.
type tallyValue struct {
	missing bool
	odd     bool // a value the tally does not keep
	v       bson.RawValue
}

// tallyRow is one combination of values and its count.
type tallyRow struct {
	vals []tallyValue // by fastSpec.fields
	n    int64
}

// tallyRows reads the tally of a table: ok is false when the table has
// none (yet).
func (f *fastPaths) tallyRows(ctx context.Context, db, table string) ([]tallyRow, bool, error) {
	ident := pgx.Identifier{db, table}.Sanitize()
	rows, err := f.pool.Query(ctx, `SELECT (SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass($1) AND tgname = ANY($2)),
		t.q::text, t.qt, t.s::text, t.st, t.nd::text, t.ndt, t.n
		FROM (SELECT 1) AS one LEFT JOIN "den$devdb".tally t ON t.tbl = to_regclass($1) AND t.n <> 0`, ident, tallyTriggers)
	if gone(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	var out []tallyRow
	triggers := int64(-1)
	for rows.Next() {
		var cols [6]*string
		var n *int64
		if err := rows.Scan(&triggers, &cols[0], &cols[1], &cols[2], &cols[3], &cols[4], &cols[5], &n); err != nil {
			return nil, false, err
		}
		if n == nil {
			continue // no combination
		}
		row := tallyRow{n: *n}
		for i := 0; i < len(cols); i += 2 {
			v, err := tallyDecode(*cols[i], *cols[i+1])
			if err != nil {
				return nil, false, err
			}
			row.vals = append(row.vals, v)
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		if gone(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return out, triggers == int64(len(tallyTriggers)), nil
}

// tallyDecode reads a value of the tally, as the tally's functions keep it:
// its jsonb and FerretDB's type.
func tallyDecode(js, typ string) (tallyValue, error) {
	var (
		v   any
		err error
	)
	switch typ {
	case "":
		return tallyValue{missing: true}, nil
	case "objectId":
		var hex string
		if err = json.Unmarshal([]byte(js), &hex); err == nil {
			v, err = bson.ObjectIDFromHex(hex)
		}
	case "string":
		var s string
		err = json.Unmarshal([]byte(js), &s)
		v = s
	case "int":
		var n int64
		n, err = strconv.ParseInt(js, 10, 32)
		v = int32(n)
	case "long":
		v, err = strconv.ParseInt(js, 10, 64)
	case "double":
		v, err = strconv.ParseFloat(js, 64)
	case "bool":
		v, err = strconv.ParseBool(js)
	case "date":
		var ms int64
		ms, err = strconv.ParseInt(js, 10, 64)
		v = bson.DateTime(ms)
	case "null":
		return tallyValue{v: bson.RawValue{Type: bson.TypeNull}}, nil
	default:
		return tallyValue{odd: true}, nil
	}
	if err != nil {
		return tallyValue{}, forward("tally value %s of type %s: %v", js, typ, err)
	}
	t, b, err := bson.MarshalValue(v)
	if err != nil {
		return tallyValue{}, err
	}
	return tallyValue{v: bson.RawValue{Type: t, Value: b}}, nil
}

// countFields are the fields of a count the path reads or ignores.
var countFields = map[string]bool{"query": true, "skip": true, "limit": true, "hint": true, "fields": true, "comment": true}

// count answers a count command from the tally.
func (f *fastPaths) count(ctx context.Context, cmd bson.Raw) (bson.Raw, error) {
	db, coll, err := commandOf(cmd, countFields)
	if err != nil {
		return nil, err
	}
	filter := bson.Raw(emptyDoc)
	var skip, limit int64
	elems, _ := cmd.Elements()
	for _, e := range elems[1:] {
		ok := true
		switch e.Key() {
		case "query":
			filter, ok = e.Value().DocumentOK()
		case "skip":
			skip, ok = intOf(e.Value())
			ok = ok && skip >= 0
		case "limit":
			limit, ok = intOf(e.Value())
			ok = ok && limit >= 0
		case "comment":
			_, ok = e.Value().StringValueOK()
		}
		if !ok {
			return nil, forward("%s", e.Key())
		}
	}
	n, err := f.tallyCount(ctx, db, coll, filter)
	if err != nil {
		return nil, err
	}
	n = max(n-skip, 0)
	if limit > 0 {
		n = min(n, limit)
	}
	if n > math.MaxInt32 {
		return nil, forward("a count of %d", n)
	}
	return bson.Marshal(bson.D{{Key: "n", Value: int32(n)}, {Key: "ok", Value: 1.0}})
}

// tallyCount counts the documents filter matches.
func (f *fastPaths) tallyCount(ctx context.Context, db, coll string, filter bson.Raw) (int64, error) {
	groups, err := f.tallyGroups(ctx, db, coll, filter, groupKey{constant: &bson.RawValue{Type: bson.TypeInt32, Value: []byte{1, 0, 0, 0}}})
	if err != nil || len(groups) == 0 {
		return 0, err
	}
	return groups[0].n, nil
}

// groupKey is a $group's _id: a constant, a field, or a document of fields.
type groupKey struct {
	constant *bson.RawValue
	field    int      // of fastSpec.fields, when names is nil and constant nil
	names    []string // the document's field names
	fields   []int    // and the fields they are
}

// group is one group of documents, its _id and how many they are.
type group struct {
	id bson.RawValue
	n  int64
}

// tallyGroups reads the tally of db.coll and groups the combinations
// filter matches by key, in the order of their keys.
func (f *fastPaths) tallyGroups(ctx context.Context, db, coll string, filter bson.Raw, key groupKey) ([]group, error) {
	spec := fastSpecs[coll]
	table, err := f.table(ctx, db, coll)
	if err != nil {
		return nil, err
	}
	if err := checkTallyFilter(filter, spec); err != nil {
		return nil, err
	}
	rows, ok, err := f.tallyRows(ctx, db, table)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, forward("no tally of %s.%s yet", db, coll)
	}
	return groupRows(rows, key, func(row tallyRow) (bool, error) { return rowMatches(filter, spec, row) })
}

// groupRows groups the rows match says are in by key, in the order of
// their keys, as FerretDB's $group does.
func groupRows(rows []tallyRow, key groupKey, match func(tallyRow) (bool, error)) ([]group, error) {
	type acc struct {
		exact string // the key's BSON, which every combination of the group must share
		id    bson.RawValue
		n     int64
	}
	byKey := map[string]*acc{}
	for _, row := range rows {
		in, err := match(row)
		if err != nil {
			return nil, err
		}
		if !in {
			continue
		}
		id, canon, err := key.of(row)
		if err != nil {
			return nil, err
		}
		exact := fmt.Sprintf("%d:%x", id.Type, id.Value)
		a := byKey[canon]
		if a == nil {
			a = &acc{exact: exact, id: id}
			byKey[canon] = a
		} else if a.exact != exact {
			return nil, forward("a group of equal numbers of different types")
		}
		a.n += row.n
	}
	var out []group
	for _, canon := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, group{id: byKey[canon].id, n: byKey[canon].n})
	}
	return out, nil
}

// of is the group _id of a combination, and its canonical form: equal for
// the keys FerretDB's $group puts together (numbers of equal value, of
// any type).
func (k groupKey) of(row tallyRow) (bson.RawValue, string, error) {
	if k.constant != nil {
		return *k.constant, "", nil
	}
	value := func(field int) (tallyValue, error) {
		v := row.vals[field]
		if v.odd {
			return v, forward("a group of a value the tally does not keep")
		}
		return v, nil
	}
	if k.names == nil {
		v, err := value(k.field)
		if err != nil {
			return bson.RawValue{}, "", err
		}
		if v.missing {
			v = tallyValue{v: bson.RawValue{Type: bson.TypeNull}}
		}
		return v.v, canonical(v.v), nil
	}
	d := bson.D{}
	var canon []string
	for i, name := range k.names {
		v, err := value(k.fields[i])
		if err != nil {
			return bson.RawValue{}, "", err
		}
		if v.missing {
			if len(k.names) > 1 {
				canon = append(canon, "-")
				continue // FerretDB leaves it out
			}
			v = tallyValue{v: bson.RawValue{Type: bson.TypeNull}}
		}
		d = append(d, bson.E{Key: name, Value: v.v})
		canon = append(canon, canonical(v.v))
	}
	b, err := bson.Marshal(d)
	if err != nil {
		return bson.RawValue{}, "", err
	}
	return bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: b}, strings.Join(canon, "\x00"), nil
}

// canonical is a scalar's value as $group compares it: its type's
// bracket and its value, numbers by value whatever their type.
func canonical(v bson.RawValue) string {
	if f, ok := number(v); ok {
		return "1" + f.Text('g', -1)
	}
	return strconv.Itoa(int(v.Type)) + string(v.Value)
}

// number is v as an exact number, when it is one.
func number(v bson.RawValue) (*big.Float, bool) {
	f := new(big.Float).SetPrec(128)
	switch v.Type {
	case bson.TypeInt32:
		return f.SetInt64(int64(v.Int32())), true
	case bson.TypeInt64:
		return f.SetInt64(v.Int64()), true
	case bson.TypeDouble:
		if math.IsNaN(v.Double()) {
			return nil, false
		}
		return f.SetFloat64(v.Double()), true
	}
	return nil, false
}

// checkTallyFilter says whether the count path decides filter: on spec's
// fields only, with the operators it knows.
func checkTallyFilter(filter bson.Raw, spec fastSpec) error {
	elems, err := filter.Elements()
	if err != nil {
		return forward("unreadable filter")
	}
	for _, e := range elems {
		switch key := e.Key(); key {
		case "$and", "$or", "$nor":
			arr, ok := e.Value().ArrayOK()
			if !ok {
				return forward("%s of type %s", key, e.Value().Type)
			}
			vals, err := arr.Values()
			if err != nil || len(vals) == 0 {
				return forward("empty %s", key)
			}
			for _, v := range vals {
				sub, ok := v.DocumentOK()
				if !ok {
					return forward("%s of a %s", key, v.Type)
				}
				if err := checkTallyFilter(sub, spec); err != nil {
					return err
				}
			}
		default:
			if !slices.Contains(spec.fields, key) {
				return forward("a filter on %s", key)
			}
			conds, err := pathConditions(e.Value())
			if err != nil {
				return err
			}
			for _, c := range conds {
				if sqlOps[c.op] != "" && c.v.Type == bson.TypeNull {
					return forward("%s null", c.op)
				}
				if c.op == "$type" {
					return forward("$type") // the find path's
				}
			}
		}
	}
	return nil
}

// rowMatches decides whether the documents of a combination match filter
// (checked by checkTallyFilter).
func rowMatches(filter bson.Raw, spec fastSpec, row tallyRow) (bool, error) {
	elems, _ := filter.Elements()
	for _, e := range elems {
		var match bool
		switch key := e.Key(); key {
		case "$and", "$or", "$nor":
			vals, _ := e.Value().Array().Values()
			any, all := false, true
			for _, v := range vals {
				m, err := rowMatches(v.Document(), spec, row)
				if err != nil {
					return false, err
				}
				any, all = any || m, all && m
			}
			match = map[string]bool{"$and": all, "$or": any, "$nor": !any}[key]
		default:
			v := row.vals[slices.Index(spec.fields, key)]
			if v.odd {
				return false, forward("a filter on a value the tally does not keep")
			}
			conds, _ := pathConditions(e.Value())
			match = true
			for _, c := range conds {
				match = match && holds(c, v)
			}
		}
		if !match {
			return false, nil
		}
	}
	return true, nil
}

// holds decides a condition on a kept or missing value, as MongoDB does.
func holds(c condition, x tallyValue) bool {
	switch c.op {
	case "$eq":
		return equal(x, c.v)
	case "$ne":
		return !equal(x, c.v)
	case "$in", "$nin":
		vals, _ := c.v.Array().Values()
		in := slices.ContainsFunc(vals, func(v bson.RawValue) bool { return equal(x, v) })
		return in == (c.op == "$in")
	case "$exists":
		return !x.missing == c.v.Boolean()
	}
	if x.missing {
		return false
	}
	r, ok := compare(x.v, c.v)
	if !ok {
		return false
	}
	switch c.op {
	case "$gt":
		return r > 0
	case "$gte":
		return r >= 0
	case "$lt":
		return r < 0
	}
	return r <= 0 // $lte
}

// equal decides an equality to v: null matches a missing value too.
func equal(x tallyValue, v bson.RawValue) bool {
	if v.Type == bson.TypeNull {
		return x.missing || x.v.Type == bson.TypeNull
	}
	if x.missing {
		return false
	}
	r, ok := compare(x.v, v)
	return ok && r == 0
}

// compare orders two scalars of the same type bracket; ok is false for
// different brackets, which no comparison matches.
func compare(a, b bson.RawValue) (int, bool) {
	if x, ok := number(a); ok {
		y, ok := number(b)
		if !ok {
			return 0, false
		}
		return x.Cmp(y), true
	}
	if a.Type != b.Type {
		return 0, false
	}
	switch a.Type {
	case bson.TypeString:
		return strings.Compare(a.StringValue(), b.StringValue()), true
	case bson.TypeObjectID:
		x, y := a.ObjectID(), b.ObjectID()
		return strings.Compare(string(x[:]), string(y[:])), true
	case bson.TypeBoolean:
		x, y := a.Boolean(), b.Boolean()
		switch {
		case x == y:
			return 0, true
		case y:
			return -1, true
		}
		return 1, true
	case bson.TypeDateTime:
		x, y := a.DateTime(), b.DateTime()
		switch {
		case x < y:
			return -1, true
		case x > y:
			return 1, true
		}
		return 0, true
	case bson.TypeNull:
		return 0, true
	}
	return 0, false
}

// aggregateFields are the fields of an aggregate the path reads or
// ignores.
var aggregateFields = map[string]bool{"pipeline": true, "cursor": true, "allowDiskUse": true, "hint": true, "comment": true}

// aggregate answers an aggregate that counts by group from the tally.
func (f *fastPaths) aggregate(ctx context.Context, up net.Conn, cmd bson.Raw) (bson.Raw, error) {
	db, coll, err := commandOf(cmd, aggregateFields)
	if err != nil {
		return nil, err
	}
	batchSize := int64(defaultBatchSize)
	var pipeline bson.RawArray
	elems, _ := cmd.Elements()
	for _, e := range elems[1:] {
		ok := true
		switch e.Key() {
		case "pipeline":
			pipeline, ok = e.Value().ArrayOK()
		case "cursor":
			var c bson.Raw
			if c, ok = e.Value().DocumentOK(); ok {
				batchSize, ok = cursorBatchSize(c)
			}
		case "allowDiskUse":
			_, ok = e.Value().BooleanOK()
		case "comment":
			_, ok = e.Value().StringValueOK()
		}
		if !ok {
			return nil, forward("%s", e.Key())
		}
	}
	if pipeline == nil {
		return nil, forward("no pipeline")
	}
	p, err := parsePipeline(pipeline, fastSpecs[coll])
	if err != nil {
		return nil, err
	}
	groups, err := f.tallyGroups(ctx, db, coll, p.filter, p.key)
	if errors.As(err, new(errForward)) {
		// A filter or a value the tally does not decide: its matches,
		// when they are few.
		groups, err = f.matchGroups(ctx, up, db, coll, p)
	}
	if err != nil {
		return nil, err
	}
	var docs []bson.Raw
	for _, g := range groups {
		n := max(g.n-p.skip, 0)
		if p.limit > 0 {
			n = min(n, p.limit)
		}
		if n == 0 {
			continue
		}
		group := bson.D{{Key: "_id", Value: g.id}}
		if p.out != "" {
			group = append(group, bson.E{Key: p.out, Value: p.sum(n)})
		}
		doc, err := bson.Marshal(group)
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
	if int64(len(docs)) >= batchSize {
		return nil, forward("%d groups for a batch of %d", len(docs), batchSize)
	}
	return cursorReply(db+"."+coll, docs)
}

// cursorBatchSize reads an aggregate's cursor document.
func cursorBatchSize(c bson.Raw) (int64, bool) {
	elems, err := c.Elements()
	if err != nil {
		return 0, false
	}
	size := int64(defaultBatchSize)
	for _, e := range elems {
		n, ok := intOf(e.Value())
		if e.Key() != "batchSize" || !ok || n < 1 {
			return 0, false
		}
		size = n
	}
	return size, true
}

// countPipeline is an aggregate's pipeline the count path serves.
type countPipeline struct {
	filter      bson.Raw
	skip, limit int64 // before a constant group: the driver's countDocuments
	key         groupKey
	out         string        // the count's field; "": none (the distinct keys)
	one         bson.RawValue // what $sum adds: 1 of some type
}

// sum is a group's count n as FerretDB's $sum of one gives it: of the
// type of the 1 it adds, an int32 turned int64 past its range.
func (p countPipeline) sum(n int64) any {
	switch p.one.Type {
	case bson.TypeDouble:
		return float64(n)
	case bson.TypeInt64:
		return n
	}
	if n > math.MaxInt32 {
		return n
	}
	return int32(n)
}

// parsePipeline reads the stages of a pipeline that counts by group.
func parsePipeline(pipeline bson.RawArray, spec fastSpec) (countPipeline, error) {
	stages, err := pipeline.Values()
	if err != nil || len(stages) == 0 || len(stages) > 4 {
		return countPipeline{}, forward("a pipeline of %d stages", len(stages))
	}
	p := countPipeline{filter: bson.Raw(emptyDoc)}
	for i, s := range stages {
		doc, ok := s.DocumentOK()
		elems, err := doc.Elements()
		if !ok || err != nil || len(elems) != 1 {
			return countPipeline{}, forward("a stage that is no one-field document")
		}
		name, arg := elems[0].Key(), elems[0].Value()
		last := i == len(stages)-1
		switch {
		case name == "$match" && i == 0 && !last:
			if p.filter, ok = arg.DocumentOK(); !ok {
				return countPipeline{}, forward("$match of type %s", arg.Type)
			}
		case name == "$skip" && !last:
			p.skip, ok = intOf(arg)
			if !ok || p.skip < 0 || p.limit > 0 {
				return countPipeline{}, forward("$skip")
			}
		case name == "$limit" && !last:
			p.limit, ok = intOf(arg)
			if !ok || p.limit < 1 {
				return countPipeline{}, forward("$limit")
			}
		case name == "$group" && last:
			if p.key, p.out, p.one, err = parseGroup(arg, spec); err != nil {
				return countPipeline{}, err
			}
		default:
			return countPipeline{}, forward("stage %s", name)
		}
	}
	if (p.skip > 0 || p.limit > 0) && p.key.constant == nil {
		return countPipeline{}, forward("$skip or $limit before a $group by fields")
	}
	return p, nil
}

// parseGroup reads {_id: key, out: {$sum: 1}}, or {_id: key} alone (the
// distinct keys: out is "").
func parseGroup(arg bson.RawValue, spec fastSpec) (groupKey, string, bson.RawValue, error) {
	doc, ok := arg.DocumentOK()
	elems, err := doc.Elements()
	if !ok || err != nil || len(elems) < 1 || len(elems) > 2 || elems[0].Key() != "_id" {
		return groupKey{}, "", bson.RawValue{}, forward("a $group of other than _id and one count")
	}
	key, err := parseGroupKey(elems[0].Value(), spec)
	if err != nil {
		return groupKey{}, "", bson.RawValue{}, err
	}
	if len(elems) == 1 {
		return key, "", bson.RawValue{}, nil
	}
	out := elems[1].Key()
	if out == "" || strings.ContainsAny(out, ".$\x00") {
		return groupKey{}, "", bson.RawValue{}, forward("a count named %q", out)
	}
	acc, ok := elems[1].Value().DocumentOK()
	accElems, err := acc.Elements()
	if !ok || err != nil || len(accElems) != 1 || accElems[0].Key() != "$sum" {
		return groupKey{}, "", bson.RawValue{}, forward("an accumulator other than $sum")
	}
	one := accElems[0].Value()
	if f, ok := number(one); !ok || f.Cmp(big.NewFloat(1)) != 0 {
		return groupKey{}, "", bson.RawValue{}, forward("$sum of other than 1")
	}
	return key, out, one, nil
}

// parseGroupKey reads a $group's _id.
func parseGroupKey(v bson.RawValue, spec fastSpec) (groupKey, error) {
	field := func(s string) (int, bool) {
		i := slices.Index(spec.fields, strings.TrimPrefix(s, "$"))
		return i, strings.HasPrefix(s, "$") && i >= 0
	}
	switch v.Type {
	case bson.TypeString:
		s := v.StringValue()
		if !strings.HasPrefix(s, "$") {
			return groupKey{constant: &v}, nil
		}
		i, ok := field(s)
		if !ok {
			return groupKey{}, forward("a $group by %s", s)
		}
		return groupKey{field: i}, nil
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble, bson.TypeBoolean, bson.TypeNull, bson.TypeObjectID:
		return groupKey{constant: &v}, nil
	case bson.TypeEmbeddedDocument:
		elems, err := v.Document().Elements()
		if err != nil || len(elems) == 0 {
			return groupKey{}, forward("a $group by an empty document")
		}
		var k groupKey
		for _, e := range elems {
			s, ok := e.Value().StringValueOK()
			i, isField := field(s)
			if !ok || !isField || e.Key() == "" || strings.ContainsAny(e.Key(), ".$\x00") {
				return groupKey{}, forward("a $group by a document of other than fields")
			}
			k.names = append(k.names, e.Key())
			k.fields = append(k.fields, i)
		}
		return k, nil
	}
	return groupKey{}, forward("a $group by a %s", v.Type)
}
