package devdb

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/internal/wire"
)

// The fast paths: reads the proxy answers from PostgreSQL, at a cost that
// does not grow with the collection, instead of forwarding them to
// FerretDB, which decodes every document its storage returns (75 µs a
// task), and pushes down only top-level equalities, never a sort, nor a
// limit with a filter, nor an $in or a range:
//
//   - a page of a list (fastfind.go): a find sorted on _id (or not
//     sorted), limited, whose filter the list indexes (pgfast.go) narrow.
//     PostgreSQL lists the candidates in order, a superset of what the
//     filter matches, and says which surely match; those the proxy reads
//     from PostgreSQL as FerretDB would (sjson.go), the others FerretDB
//     reads by their _id with the whole filter and the projection, so
//     that what it alone decides stays its decision;
//   - counts by group (fastcount.go): count, and an aggregate that groups
//     by some of a task's queue, status and node and counts, whose filter
//     is on those fields only, answered from the tally (pgfast.go).
//
// Anything else, and any case these do not decide exactly, is forwarded
// to FerretDB as it was sent. Only the collections of fastSpecs are
// served.

// fastPaths answers the reads it can for the proxy.
type fastPaths struct {
	pool *pgxpool.Pool

	requestID atomic.Int32 // for the requests the proxy makes itself

	statsMu   sync.Mutex
	answered  map[string]int64 // by command
	forwarded map[string]int64 // by command and reason

	// The find path's candidates: read from _jsonb, or asked of FerretDB.
	decoded, asked atomic.Int64
}

// fastPool is how many PostgreSQL connections the fast paths use at most.
const fastPool = 4

// newFastPaths connects the fast paths to PostgreSQL at url.
func newFastPaths(ctx context.Context, url string) (*fastPaths, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("devdb: fast paths: %w", err)
	}
	cfg.MaxConns = fastPool
	// Queries are small and planned each time: compiling them would cost
	// more than running them.
	cfg.ConnConfig.RuntimeParams["jit"] = "off"
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = fmt.Sprint(commandTimeout.Milliseconds())
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("devdb: fast paths: %w", err)
	}
	f := &fastPaths{pool: pool, answered: map[string]int64{}, forwarded: map[string]int64{}}
	f.requestID.Store(1 << 30)
	return f, nil
}

// close closes the fast paths' connections.
func (f *fastPaths) close() { f.pool.Close() }

// errForward is why a fast path leaves a command to FerretDB.
type errForward struct{ why string }

func (e errForward) Error() string { return "forwarded: " + e.why }

// forward leaves a command to FerretDB, saying why.
func forward(format string, args ...any) error { return errForward{fmt.Sprintf(format, args...)} }

// answer answers the read req itself when a fast path serves it (ok), and
// says nothing otherwise: the proxy then forwards it. up is the client's
// connection to FerretDB, which the find path reads candidates through;
// an error is one of that connection, which is then unusable.
func (f *fastPaths) answer(ctx context.Context, up net.Conn, req []byte) (reply []byte, ok bool, err error) {
	cmd, ok := plainBody(req)
	if !ok {
		return nil, false, nil
	}
	name := cmd.Index(0).Key()
	var doc bson.Raw
	switch name {
	case "find":
		doc, err = f.find(ctx, up, cmd)
	case "count":
		doc, err = f.count(ctx, cmd)
	case "aggregate":
		doc, err = f.aggregate(ctx, up, cmd)
	default:
		return nil, false, nil
	}
	var fw errForward
	if errors.As(err, &fw) {
		f.note(f.forwarded, name+": "+fw.why)
		return nil, false, nil
	}
	var ue upstreamError
	if errors.As(err, &ue) {
		return nil, false, ue.err
	}
	if err != nil {
		// PostgreSQL failed (a collection dropped meanwhile, the server
		// restarting): FerretDB answers as it would have.
		f.note(f.forwarded, name+": "+err.Error())
		return nil, false, nil
	}
	f.note(f.answered, name)
	return f.opMsg(req, doc), true, nil
}

// note counts one fast answer or forward.
func (f *fastPaths) note(m map[string]int64, key string) {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	m[key]++
}

// counts returns what the fast paths answered and forwarded so far.
func (f *fastPaths) counts() (answered, forwarded map[string]int64) {
	f.statsMu.Lock()
	defer f.statsMu.Unlock()
	answered, forwarded = map[string]int64{}, map[string]int64{}
	for k, v := range f.answered {
		answered[k] = v
	}
	for k, v := range f.forwarded {
		forwarded[k] = v
	}
	return answered, forwarded
}

// upstreamError is a failure of the connection to FerretDB.
type upstreamError struct{ err error }

func (e upstreamError) Error() string { return e.err.Error() }

// plainBody is the command of an OP_MSG request that has no flags and no
// section but its body, as drivers send a read; ok is false for any other
// request (checksums, document sequences, legacy opcodes).
func plainBody(req []byte) (bson.Raw, bool) {
	body := wire.Body(req)
	if body == nil || binary.LittleEndian.Uint32(req[wire.HeaderLen:]) != 0 || wire.HeaderLen+5+len(body) != len(req) {
		return nil, false
	}
	if body.Validate() != nil {
		return nil, false
	}
	if _, err := body.IndexErr(0); err != nil {
		return nil, false
	}
	return body, true
}

// opMsg is the OP_MSG reply to req whose body is doc.
func (f *fastPaths) opMsg(req []byte, doc bson.Raw) []byte {
	msg := make([]byte, wire.HeaderLen+5, wire.HeaderLen+5+len(doc))
	binary.LittleEndian.PutUint32(msg[4:], uint32(f.requestID.Add(1)))
	copy(msg[8:12], req[4:8]) // responseTo: the request's id
	binary.LittleEndian.PutUint32(msg[12:], wire.OpMsg)
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

// request is an OP_MSG request of the proxy's own with body doc.
func (f *fastPaths) request(doc bson.Raw) []byte {
	msg := make([]byte, wire.HeaderLen+5, wire.HeaderLen+5+len(doc))
	binary.LittleEndian.PutUint32(msg[4:], uint32(f.requestID.Add(1)))
	binary.LittleEndian.PutUint32(msg[12:], wire.OpMsg)
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg, uint32(len(msg)))
	return msg
}

// cursorReply is the body of a reply to find or aggregate whose whole
// result is docs, as FerretDB and MongoDB shape it.
func cursorReply(ns string, docs []bson.Raw) (bson.Raw, error) {
	batch := make(bson.A, len(docs))
	for i, d := range docs {
		batch[i] = d
	}
	return bson.Marshal(bson.D{
		{Key: "cursor", Value: bson.D{{Key: "firstBatch", Value: batch}, {Key: "id", Value: int64(0)}, {Key: "ns", Value: ns}}},
		{Key: "ok", Value: 1.0},
	})
}

// table returns FerretDB's table of collection coll of database db (its
// schema); a collection that does not exist is forwarded. It is looked up each
// time (an index lookup): a collection renamed keeps its table, and one
// made again under the old name gets another.
func (f *fastPaths) table(ctx context.Context, db, coll string) (string, error) {
	var t string
	q := fmt.Sprintf(`SELECT _jsonb->>'table' FROM %s WHERE _jsonb->'_id' = to_jsonb($1::text)`, pgx.Identifier{db, "_ferretdb_database_metadata"}.Sanitize())
	err := f.pool.QueryRow(ctx, q, coll).Scan(&t)
	if errors.Is(err, pgx.ErrNoRows) || gone(err) || (err == nil && t == "") {
		return "", forward("no collection %s.%s", db, coll)
	}
	return t, err
}

// commandOf reads what a fast path needs of every command: its
// collection, its database and whether any of its fields is one the path
// does not know (allowed says which it does, besides the command's name
// and the ones every command may carry).
func commandOf(cmd bson.Raw, allowed map[string]bool) (db, coll string, err error) {
	elems, err := cmd.Elements()
	if err != nil {
		return "", "", forward("unreadable")
	}
	coll, ok := elems[0].Value().StringValueOK()
	if !ok {
		return "", "", forward("no collection")
	}
	if _, ok := fastSpecs[coll]; !ok {
		return "", "", forward("collection %s has no fast path", coll)
	}
	for _, e := range elems[1:] {
		k := e.Key()
		switch {
		case k == "$db":
			db, ok = e.Value().StringValueOK()
			if !ok {
				return "", "", forward("$db")
			}
		case allowed[k]:
		case anyCommandField[k] != 0:
			if e.Value().Type != anyCommandField[k] && !(k == "maxTimeMS" && e.Value().Type == bson.TypeInt64) {
				return "", "", forward("field %s of type %s", k, e.Value().Type)
			}
			if n, ok := intOf(e.Value()); k == "maxTimeMS" && (!ok || n < 0) {
				return "", "", forward("maxTimeMS")
			}
		default:
			return "", "", forward("field %s", k)
		}
	}
	if db == "" || strings.ContainsAny(db, "\x00") {
		return "", "", forward("no database")
	}
	return db, coll, nil
}

// anyCommandField are the fields of a read that change nothing in its
// answer (FerretDB ignores them), with the type each must have (maxTimeMS:
// or an int64).
var anyCommandField = map[string]bson.Type{
	"lsid": bson.TypeEmbeddedDocument, "$clusterTime": bson.TypeEmbeddedDocument,
	"$readPreference": bson.TypeEmbeddedDocument, "readConcern": bson.TypeEmbeddedDocument,
	"apiVersion": bson.TypeString, "apiStrict": bson.TypeBoolean, "apiDeprecationErrors": bson.TypeBoolean,
	"maxTimeMS": bson.TypeInt32,
}

// intOf is v as a whole number, when it is an int32 or an int64.
func intOf(v bson.RawValue) (int64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return int64(v.Int32()), true
	case bson.TypeInt64:
		return v.Int64(), true
	}
	return 0, false
}
