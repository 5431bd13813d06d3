package devdb

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/wire"
)

// The find path: a page of a list, answered in _id order.
//
// It serves a find on a collection of fastSpecs with
//
//   - a sort of {_id: 1} or {_id: -1}, or none (then _id ascending, one of
//     the orders MongoDB may give an unsorted find);
//   - a limit of 1 to maxFindLimit, and a skip of at most maxFindLimit
//     less the limit; or no limit nor skip, when fewer than maxFindLimit
//     documents match;
//   - a filter of the elements superset (fastsql.go) reads: paths, each
//     with a value (ObjectId, string, number, boolean, date, null) or
//     operators ($eq, $ne, $gt, $gte, $lt, $lte, $in, $nin, $exists) of
//     such values, $type of such a type's alias, $not of operators or
//     of a regular expression (left to FerretDB), and $and and $or of
//     such filters;
//   - a projection that only includes or only excludes fields;
//   - no other field but batchSize, singleBatch, comment, hint,
//     allowDiskUse and those any read carries.
//
// PostgreSQL lists the candidates' _ids in order from the list indexes
// (those of ObjectIds only: a collection whose documents of other _id
// types could match has the command forwarded), with a WHERE that holds
// for every document the filter matches (superset, fastsql.go), and says
// of each whether it surely matches (exactSQL): a scalar of the filter's
// value's type bracket, compared in SQL. Those the proxy reads from their
// _jsonb as FerretDB does (sjson.go), projecting them as FerretDB does;
// the others FerretDB reads, each by its _id with the whole filter and
// the projection, so that it decides what they match (null, $ne, $nin,
// $exists, arrays, paths through arrays, projections of paths). The
// matches make the answer, all in the first batch (cursor id 0), as
// FerretDB's would be; a first batch that holds the whole limit closes
// the cursor, as MongoDB's does (FerretDB leaves it open, for a getMore
// that finds nothing). When more candidates are rejected than maxRejected
// allows (a filter the SQL narrows poorly), the command is forwarded.

const (
	// maxFindLimit is the most documents (skip and limit) a find on the
	// fast path may ask for.
	maxFindLimit = 1000
	// defaultBatchSize is FerretDB's (and MongoDB's) first batch when a
	// find names none.
	defaultBatchSize = 101
	// maxReply bounds the documents of one answer: past it, FerretDB
	// answers as it does.
	maxReply = 16 << 20
)

// maxRejected is how many candidates a find may read in vain: 4 times
// the documents it asks for, and at least 100.
func maxRejected(want int64) int64 { return max(4*want, 100) }

// findCmd is a find the fast path serves.
type findCmd struct {
	db, coll    string
	filter      bson.Raw
	projection  bson.Raw // nil: whole documents
	desc        bool
	skip, limit int64
	unbounded   bool // the find named no limit: limit is maxFindLimit
	batchSize   int64
	singleBatch bool
}

// findFields are the fields of a find the fast path reads or ignores.
var findFields = map[string]bool{
	"filter": true, "sort": true, "projection": true, "skip": true, "limit": true,
	"batchSize": true, "singleBatch": true, "comment": true, "hint": true, "allowDiskUse": true,
}

// parseFind reads a find command, or says why the fast path leaves it.
func parseFind(cmd bson.Raw) (findCmd, error) {
	db, coll, err := commandOf(cmd, findFields)
	if err != nil {
		return findCmd{}, err
	}
	fc := findCmd{db: db, coll: coll, batchSize: defaultBatchSize, filter: bson.Raw(emptyDoc)}
	elems, _ := cmd.Elements()
	for _, e := range elems[1:] {
		v := e.Value()
		var ok bool
		switch e.Key() {
		case "filter":
			fc.filter, ok = v.DocumentOK()
		case "sort":
			var sort bson.Raw
			if sort, ok = v.DocumentOK(); ok {
				fc.desc, ok = idSort(sort)
			}
		case "projection":
			if fc.projection, ok = v.DocumentOK(); ok {
				ok = plainProjection(fc.projection)
			}
		case "skip":
			fc.skip, ok = intOf(v)
			ok = ok && fc.skip >= 0
		case "limit":
			fc.limit, ok = intOf(v)
		case "batchSize":
			fc.batchSize, ok = intOf(v)
			ok = ok && fc.batchSize > 0
		case "singleBatch":
			fc.singleBatch, ok = v.BooleanOK()
		case "comment":
			_, ok = v.StringValueOK()
		case "allowDiskUse":
			_, ok = v.BooleanOK()
		default:
			ok = true
		}
		if !ok {
			return findCmd{}, forward("%s", e.Key())
		}
	}
	if fc.limit == 0 && fc.skip == 0 {
		// No limit: answered when fewer than maxFindLimit match (a
		// node's own claimed tasks), else left to FerretDB.
		fc.limit, fc.unbounded = maxFindLimit, true
	}
	if fc.limit < 1 || fc.skip+fc.limit > maxFindLimit {
		return findCmd{}, forward("limit %d, skip %d", fc.limit, fc.skip)
	}
	return fc, nil
}

// emptyDoc is the empty BSON document.
var emptyDoc = []byte{5, 0, 0, 0, 0}

// idSort reads a sort document that is {_id: 1}, {_id: -1} or empty.
func idSort(sort bson.Raw) (desc, ok bool) {
	elems, err := sort.Elements()
	if err != nil || len(elems) > 1 {
		return false, false
	}
	if len(elems) == 0 {
		return false, true
	}
	if elems[0].Key() != "_id" {
		return false, false
	}
	switch v := elems[0].Value(); {
	case v.Type == bson.TypeDouble && (v.Double() == 1 || v.Double() == -1):
		return v.Double() == -1, true
	default:
		n, ok := intOf(v)
		return n == -1, ok && (n == 1 || n == -1)
	}
}

// plainProjection reports whether a projection only includes or only
// excludes plain fields (_id either way), none inside another.
func plainProjection(p bson.Raw) bool {
	elems, err := p.Elements()
	if err != nil {
		return false
	}
	var paths []string
	include, exclude := false, false
	for _, e := range elems {
		if _, ok := fieldPath(e.Key()); !ok {
			return false
		}
		var on bool
		switch v := e.Value(); v.Type {
		case bson.TypeBoolean:
			on = v.Boolean()
		case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
			n, _ := v.AsFloat64OK()
			if n != 0 && n != 1 {
				return false
			}
			on = n == 1
		default:
			return false
		}
		if e.Key() != "_id" {
			include, exclude = include || on, exclude || !on
		}
		for _, q := range paths {
			if strings.HasPrefix(q+".", e.Key()+".") || strings.HasPrefix(e.Key()+".", q+".") {
				return false
			}
		}
		paths = append(paths, e.Key())
	}
	return !(include && exclude)
}

// find answers a find from the list indexes, through FerretDB's reads by
// _id, or says why it leaves it to FerretDB.
func (f *fastPaths) find(ctx context.Context, up net.Conn, cmd bson.Raw) (bson.Raw, error) {
	fc, err := parseFind(cmd)
	if err != nil {
		return nil, err
	}
	table, err := f.table(ctx, fc.db, fc.coll)
	if err != nil {
		return nil, err
	}
	q, err := planFind(fc, table, fastSpecs[fc.coll])
	if err != nil {
		return nil, err
	}
	if err := f.checkIDs(ctx, q); err != nil {
		return nil, err
	}
	// The first batch is at most batchSize documents: when that many
	// match, FerretDB keeps a cursor open, which is left to it.
	want := min(fc.limit, fc.batchSize)
	docs, err := f.collect(ctx, up, q, fc.skip+want)
	if err != nil {
		return nil, err
	}
	if int64(len(docs)) > fc.skip {
		docs = docs[fc.skip:]
	} else {
		docs = nil
	}
	// A batch as long as the limit ends the cursor (a claim's candidates
	// ask for as many as they list); a shorter one may leave more.
	if !fc.singleBatch && int64(len(docs)) == fc.batchSize && (fc.unbounded || fc.batchSize < fc.limit) {
		return nil, forward("a whole batch matches")
	}
	if fc.unbounded && int64(len(docs)) == fc.limit {
		return nil, forward("%d or more match a find without a limit", fc.limit)
	}
	return cursorReply(fc.db+"."+fc.coll, docs)
}

// checkIDs forwards a query whose matches may include documents whose
// _id is no ObjectId (the list indexes hold ObjectIds only).
func (f *fastPaths) checkIDs(ctx context.Context, q findQuery) error {
	if q.idTyped {
		return nil
	}
	var odd bool
	if err := f.pool.QueryRow(ctx, q.oddSQL, q.oddArgs...).Scan(&odd); err != nil {
		return err
	}
	if odd {
		return forward("documents with an _id that is no ObjectId may match")
	}
	return nil
}

// findQuery is how a find's candidates are read.
type findQuery struct {
	fc      findCmd
	table   string // its schema's and name, quoted
	spec    fastSpec
	oddSQL  string // whether a document whose _id is no ObjectId passes the superset
	oddArgs []any
	idTyped bool // the filter requires an ObjectId _id
	// decode: the candidates SQL decides exactly are read from _jsonb
	// (sjson.go) and projected with proj; false for a projection of
	// paths, which FerretDB applies.
	decode bool
	proj   topProjection
	// rejectAt, when set, is how many candidates may be read in vain
	// (else maxRejected of the documents asked for).
	rejectAt int64
}

// planFind prepares the SQL of a find's candidates in table.
func planFind(fc findCmd, table string, spec fastSpec) (findQuery, error) {
	var a sqlArgs
	whole, typed, err := superset(fc.filter, &a)
	if err != nil {
		return findQuery{}, err
	}
	ident := pgx.Identifier{fc.db, table}.Sanitize()
	q := findQuery{fc: fc, table: ident, spec: spec, idTyped: typed,
		oddSQL:  "SELECT EXISTS (SELECT 1 FROM " + ident + " WHERE " + andSQL(sqlOddID, whole) + ")",
		oddArgs: a.args}
	q.proj, q.decode = newTopProjection(fc.projection)
	return q, nil
}

// statement is the SQL of up to n candidates after the _id after (jsonb;
// "": from the first), and its parameters: one branch per combination of
// the expansions' values, each read in _id order from a list index, and
// one for the documents where a field of the list indexes holds an array,
// merged in _id order. It selects each candidate's _id as text (an
// ObjectId's hex), its type, its jsonb (to go on from), whether SQL
// decides it matches (exactSQL), and then (when the path decodes) its
// document's text.
func (q findQuery) statement(after string, n int64) (string, []any, error) {
	picked, rest, err := expansions(q.fc.filter, q.spec)
	if err != nil {
		return "", nil, err
	}
	restDoc, err := docOf(rest)
	if err != nil {
		return "", nil, err
	}
	var a sqlArgs
	limit := a.add(n)
	restSQL, _, err := superset(restDoc, &a)
	if err != nil {
		return "", nil, err
	}
	dir, cmp := "ASC", ">"
	if q.fc.desc {
		dir, cmp = "DESC", "<"
	}
	from := ""
	if after != "" {
		from = sqlID + " " + cmp + " " + a.add(after) + "::jsonb"
	}
	branch := func(cond string) string {
		return "(SELECT _jsonb, _jsonb ->> '_id' AS id, " + sqlIDType + " AS t, " + sqlID + " AS k FROM " + q.table +
			" WHERE " + andSQL(cond, from) + " ORDER BY " + sqlID + " " + dir + " LIMIT " + limit + ")"
	}
	var branches []string
	for _, combo := range combinations(picked) {
		conds := make([]string, 0, len(combo)+1)
		for i, lit := range combo {
			conds = append(conds, sqlField(picked[i].field)+" = "+a.add(lit)+"::jsonb")
		}
		branches = append(branches, branch(andSQL(append(conds, restSQL)...)))
	}
	if len(picked) > 0 {
		whole, _, err := superset(q.fc.filter, &a)
		if err != nil {
			return "", nil, err
		}
		branches = append(branches, branch(andSQL(sqlArrays(q.spec.fields), whole)))
	}
	exact, doc := "FALSE", "NULL"
	if q.decode {
		exact = "COALESCE(" + exactSQL(q.fc.filter) + ", FALSE)"
		doc = "CASE WHEN " + exact + " THEN _jsonb::text END"
	}
	return "SELECT id, t, k::text, " + exact + ", " + doc + " FROM (" + strings.Join(branches, " UNION ALL ") + ") AS u ORDER BY k " + dir + " LIMIT " + limit, a.args, nil
}

// docOf is a document of the given elements.
func docOf(elems []bson.RawElement) (bson.Raw, error) {
	d := bson.D{}
	for _, e := range elems {
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	b, err := bson.Marshal(d)
	if err != nil {
		return nil, forward("filter: %v", err)
	}
	return b, nil
}

// candidate is a document the candidates' SQL lists.
type candidate struct {
	id  bson.ObjectID
	doc *string // its _jsonb's text, when SQL decides it matches
}

// collect reads candidates in order, and FerretDB's answer for each SQL
// does not decide (the others it decodes itself), until want documents
// matched or the candidates ran out.
func (f *fastPaths) collect(ctx context.Context, up net.Conn, q findQuery, want int64) ([]bson.Raw, error) {
	var docs []bson.Raw
	var after string // the last candidate's _id, as jsonb
	var rejected, size int64
	batch := want
	if q.rejectAt > 0 {
		// A bound on what is read in vain: no read lists more
		// candidates than twice those it lets be rejected.
		batch = min(want, 2*q.rejectAt)
	}
	for {
		cands, last, more, err := f.candidates(ctx, q, after, batch)
		if err != nil {
			return nil, err
		}
		got, err := f.judge(up, q, cands)
		if err != nil {
			return nil, err
		}
		for _, d := range got {
			if d == nil {
				rejected++
				continue
			}
			if int64(len(docs)) < want {
				docs = append(docs, d)
				size += int64(len(d))
			}
		}
		bound := maxRejected(want)
		if q.rejectAt > 0 {
			bound = q.rejectAt
		}
		if rejected > bound {
			return nil, forward("%d candidates rejected", rejected)
		}
		if size > maxReply {
			return nil, forward("an answer of %d bytes", size)
		}
		if int64(len(docs)) >= want || !more {
			return docs, nil
		}
		after = last
		batch = min(2*(want-int64(len(docs))), maxFindLimit)
		if q.rejectAt > 0 {
			batch = min(batch, 2*q.rejectAt)
		}
	}
}

// judge returns each candidate's document as FerretDB would return it, in
// order, or nil when it does not match: decoded from its _jsonb where SQL
// decided it matches, else from FerretDB, which reads it by its _id with
// the whole filter and the projection.
func (f *fastPaths) judge(up net.Conn, q findQuery, cands []candidate) ([]bson.Raw, error) {
	out := make([]bson.Raw, len(cands))
	var ask []bson.ObjectID
	var at []int
	for i, c := range cands {
		if c.doc != nil {
			if d, err := decodeCandidate(*c.doc, q.proj); err == nil {
				out[i] = d
				continue
			}
		}
		ask = append(ask, c.id)
		at = append(at, i)
	}
	f.decoded.Add(int64(len(cands) - len(ask)))
	f.asked.Add(int64(len(ask)))
	got, err := f.fetch(up, q.fc, ask)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = got[j]
	}
	return out, nil
}

// decodeCandidate is a matching document's BSON, projected, from its
// _jsonb's text.
func decodeCandidate(text string, proj topProjection) (bson.Raw, error) {
	doc, err := sjsonDecode([]byte(text))
	if err != nil {
		return nil, err
	}
	if doc, err = proj.apply(doc); err != nil {
		return nil, err
	}
	return bson.Marshal(doc)
}

// candidates reads up to n candidates after the _id after ("": from the
// first): those whose _id is an ObjectId, each document once; the last
// _id read (jsonb), and whether more may follow.
func (f *fastPaths) candidates(ctx context.Context, q findQuery, after string, n int64) (cands []candidate, last string, more bool, err error) {
	sql, args, err := q.statement(after, n)
	if err != nil {
		return nil, "", false, err
	}
	rows, err := f.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, "", false, err
	}
	defer rows.Close()
	var count int64
	var prev string
	for rows.Next() {
		var id, typ, doc *string
		var k string
		var exact bool
		if err := rows.Scan(&id, &typ, &k, &exact, &doc); err != nil {
			return nil, "", false, err
		}
		count++
		last = k
		if id == nil || typ == nil || *typ != "objectId" || *id == prev {
			continue // another _id type, decided before; or a document of two branches
		}
		prev = *id
		oid, err := bson.ObjectIDFromHex(*id)
		if err != nil {
			return nil, "", false, fmt.Errorf("candidate _id %q: %w", *id, err)
		}
		cands = append(cands, candidate{id: oid, doc: doc})
	}
	if err := rows.Err(); err != nil {
		return nil, "", false, err
	}
	return cands, last, count == n, nil
}

// fetch asks FerretDB, on up, for each candidate with the whole filter and
// the projection, all requests at once: the matching document, or nil.
func (f *fastPaths) fetch(up net.Conn, fc findCmd, ids []bson.ObjectID) ([]bson.Raw, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	reqs := make([][]byte, len(ids))
	for i, id := range ids {
		filter := bson.D{{Key: "_id", Value: id}}
		if len(fc.filter) > len(emptyDoc) {
			filter = append(filter, bson.E{Key: "$and", Value: bson.A{fc.filter}})
		}
		body := bson.D{{Key: "find", Value: fc.coll}, {Key: "filter", Value: filter}}
		if fc.projection != nil {
			body = append(body, bson.E{Key: "projection", Value: fc.projection})
		}
		body = append(body, bson.E{Key: "limit", Value: int64(1)}, bson.E{Key: "singleBatch", Value: true}, bson.E{Key: "$db", Value: fc.db})
		doc, err := bson.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("candidate's find: %w", err)
		}
		reqs[i] = f.request(doc)
	}
	if err := up.SetReadDeadline(time.Now().Add(commandTimeout)); err != nil {
		return nil, upstreamError{err}
	}
	written := make(chan error, 1)
	go func() {
		for _, r := range reqs {
			if _, err := up.Write(r); err != nil {
				up.SetReadDeadline(time.Now()) // the reader stops
				written <- err
				return
			}
		}
		written <- nil
	}()
	out := make([]bson.Raw, len(ids))
	var refused error
	for i := range reqs {
		r, err := wire.Read(up)
		if err != nil {
			<-written
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("no reply to a candidate's find within %s: %w", commandTimeout, err)
			}
			return nil, upstreamError{err}
		}
		doc, err := oneDocument(r)
		if err != nil && refused == nil {
			refused = err
		}
		out[i] = doc
	}
	if err := <-written; err != nil {
		return nil, upstreamError{err}
	}
	if refused != nil {
		return nil, forward("FerretDB refused a candidate's find: %v", refused)
	}
	return out, nil
}

// oneDocument reads FerretDB's reply to a candidate's find: its document,
// nil when it did not match.
func oneDocument(reply []byte) (bson.Raw, error) {
	if wire.MoreToCome(reply) {
		return nil, errors.New("an exhaust reply")
	}
	body := wire.Body(reply)
	if body == nil {
		return nil, errors.New("not an OP_MSG")
	}
	if ok, _ := body.Lookup("ok").AsFloat64OK(); ok != 1 {
		msg, _ := body.Lookup("errmsg").StringValueOK()
		return nil, fmt.Errorf("%s", msg)
	}
	batch, ok := body.Lookup("cursor", "firstBatch").ArrayOK()
	if id, _ := body.Lookup("cursor", "id").Int64OK(); !ok || id != 0 {
		return nil, errors.New("no whole first batch")
	}
	vals, err := batch.Values()
	if err != nil || len(vals) > 1 {
		return nil, errors.New("not one document")
	}
	if len(vals) == 0 {
		return nil, nil
	}
	doc, ok := vals[0].DocumentOK()
	if !ok {
		return nil, errors.New("not a document")
	}
	return append(bson.Raw(nil), doc...), nil
}
