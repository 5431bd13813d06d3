package devdb

import (
	"context"
	"net"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The group path's second way: an aggregate of the count path's shape
// (fastcount.go) whose $match the tally cannot decide, because it filters
// on fields the tally does not keep (a task's priority, its start_after),
// is answered from the documents it matches, read as the find path reads
// them (the list indexes, then FerretDB for what SQL cannot decide), when
// fewer than maxFindLimit match; they are grouped as the tally's
// combinations are. More matches, and whatever the find path leaves, go
// to FerretDB as before.

// maxGroupRejected is how many candidates an aggregate's matches may be
// read in vain before FerretDB is left to answer it.
const maxGroupRejected = 100

// matchGroups groups by p's key the documents of db.coll that p's filter
// matches.
func (f *fastPaths) matchGroups(ctx context.Context, up net.Conn, db, coll string, p countPipeline) ([]group, error) {
	spec := fastSpecs[coll]
	table, err := f.table(ctx, db, coll)
	if err != nil {
		return nil, err
	}
	// Only what the key reads: the documents' other fields are neither
	// decoded nor fetched.
	proj := bson.D{{Key: "_id", Value: 1}}
	switch {
	case p.key.constant != nil:
	case p.key.names == nil:
		proj = append(proj, bson.E{Key: spec.fields[p.key.field], Value: 1})
	default:
		for _, i := range p.key.fields {
			proj = append(proj, bson.E{Key: spec.fields[i], Value: 1})
		}
	}
	projection, err := bson.Marshal(proj)
	if err != nil {
		return nil, err
	}
	fc := findCmd{db: db, coll: coll, filter: p.filter, projection: projection,
		limit: maxFindLimit, unbounded: true, batchSize: maxFindLimit + 1}
	q, err := planFind(fc, table, spec)
	if err != nil {
		return nil, err
	}
	// Every match is read, so a filter the SQL narrows poorly would
	// have FerretDB judge every candidate by its _id: past a few, it
	// answers the aggregate itself.
	q.rejectAt = maxGroupRejected
	if err := f.checkIDs(ctx, q); err != nil {
		return nil, err
	}
	// A count with a limit (the driver's countDocuments with one) needs
	// only its skip and limit of the matches.
	want, capped := int64(maxFindLimit), false
	if p.key.constant != nil && p.limit > 0 && p.skip+p.limit < maxFindLimit {
		want, capped = p.skip+p.limit, true
	}
	docs, err := f.collect(ctx, up, q, want)
	if err != nil {
		return nil, err
	}
	if !capped && len(docs) >= maxFindLimit {
		return nil, forward("%d or more match an aggregate the tally cannot decide", maxFindLimit)
	}
	rows := make([]tallyRow, len(docs))
	for i, d := range docs {
		rows[i] = docRow(d, spec)
	}
	return groupRows(rows, p.key, func(tallyRow) (bool, error) { return true, nil })
}

// docRow is a document as a combination of the tally's fields, counted
// once: a value a group cannot be named after as the tally names it (an
// array, a document) is odd, which forwards a group by it.
func docRow(d bson.Raw, spec fastSpec) tallyRow {
	row := tallyRow{vals: make([]tallyValue, len(spec.fields)), n: 1}
	for i, field := range spec.fields {
		v, err := d.LookupErr(field)
		switch {
		case err != nil: // not there (a document read is well formed)
			row.vals[i] = tallyValue{missing: true}
		case v.Type == bson.TypeArray || v.Type == bson.TypeEmbeddedDocument || v.Type == bson.TypeUndefined:
			row.vals[i] = tallyValue{odd: true}
		default:
			row.vals[i] = tallyValue{v: v}
		}
	}
	return row
}
