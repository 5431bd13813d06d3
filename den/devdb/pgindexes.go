package devdb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// FerretDB 1.24's postgresql handler keeps each collection in a table of
// one jsonb column, _jsonb, and makes a MongoDB index a btree index on the
// expressions (_jsonb->'field'). But it pushes a query's equalities down as
// containment, (_jsonb->'field') @> 'value', which a btree index cannot
// serve: PostgreSQL then reads the whole table, and FerretDB decodes every
// row it returns. A GIN index on the same expression serves containment.
// So this package adds such an index, a "twin", for the fields whose
// equality picks few documents out of many in what den asks:
//
//   - _id, in every collection: a task's start, beats and finish, a queue's
//     count_todo, a GridFS file, every update by _id;
//   - a task's status: the claimed and running tasks among finished ones
//     (queue.NodeStore asks FerretDB for one status at a time);
//   - a GridFS chunk's files_id, a node document's node, and a Demo
//     report's task_id (its upsert is keyed by the task).
//
// Not a task's queue or node, though den's MongoDB indexes start with
// them: PostgreSQL estimates every containment alike (1 % of the rows),
// so with twins on them it reads their long lists (every task of the
// queue, every task the node ran) alongside the _id's one entry, and a
// claim by _id took 13 ms instead of 1 among 30,000 tasks.
//
// A twin uses GIN's default operator class, jsonb_ops, which keeps each
// scalar as its text: jsonb_path_ops hashes numbers without their sign,
// so a status of -1 (claimed) found every finished task (1) too, and a
// start took 33 ms instead of 0.1. And it is made without GIN's pending
// list (fastupdate off), which every search reads whole while a queue
// is being worked.
//
// FerretDB neither sees nor lists the twins (it keeps its indexes in its
// own metadata); they go with their table when a collection is dropped.
//
// Found with PostgreSQL's EXPLAIN on the claim, start and finish of a task:
// a sequential scan of every task before, an index scan of the twins after
// (TestTwinsServeTheProtocolsQueries).

// twinFields are the fields of a collection that have a twin besides _id.
var twinFields = map[string][]string{
	"tasks":        {"status"},
	"tasks.chunks": {"files_id"},
	"nodes":        {"node"},
	"reports":      {"task_id"},
}

// indexField matches the field expression of a twin's definition as
// pg_get_indexdef prints it: (_jsonb -> 'field'::text), the field quoted
// as an SQL literal.
var indexField = regexp.MustCompile(`\(_jsonb -> '((?:[^']|'')*)'::text\)`)

// twinSuffix ends the name of every index this package makes.
const twinSuffix = "_dentwin"

// twinOptions are a twin's storage parameters, as CREATE INDEX takes
// them; twinReloption is how pg_class.reloptions keeps them.
const (
	twinOptions   = "fastupdate='off'"
	twinReloption = "fastupdate=off"
)

// twinWork is what one MongoDB database (one PostgreSQL schema) needs for
// its twins, and the fast paths' indexes and tallies (pgfast.go), to be
// current.
type twinWork struct {
	drop []string   // twins of an earlier den, and of fields no longer wanted
	make []twinSpec // missing twins

	listDrop []string    // list indexes no longer wanted
	listMake []listIndex // missing list indexes
	statDrop []string    // statistics objects no longer wanted
	statMake []pgStat    // missing statistics objects
	tally    []string    // tables whose tally is missing
}

// pgTable is a table of a schema.
type pgTable struct{ schema, name string }

// twinSpec is one twin: a table's field.
type twinSpec struct{ table, field string }

// planTwins finds what the twins of FerretDB's collections need, per
// MongoDB database (FerretDB keeps each in the schema of its name): of
// database db only, or of all of them when db is "". Only databases with
// work are in the result. It only reads, so it may run while commands
// run; a database dropped meanwhile is left out.
func planTwins(ctx context.Context, conn *pgx.Conn, db string) (map[string]*twinWork, error) {
	type table = pgTable
	want := map[table]map[string]bool{}
	colls := map[table]string{}
	schemas, err := collectStrings(ctx, conn, `SELECT table_schema FROM information_schema.tables WHERE table_name = '_ferretdb_database_metadata' AND ($1 = '' OR table_schema = $1)`, db)
	if err != nil {
		return nil, fmt.Errorf("list FerretDB's databases: %w", err)
	}
	for _, schema := range schemas {
		rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT _jsonb->>'_id', _jsonb->>'table' FROM %s`, pgx.Identifier{schema, "_ferretdb_database_metadata"}.Sanitize()))
		if gone(err) {
			continue // dropped since it was listed (dropDatabase)
		}
		if err != nil {
			return nil, fmt.Errorf("list the collections of %s: %w", schema, err)
		}
		for rows.Next() {
			var coll, tbl string
			if err := rows.Scan(&coll, &tbl); err != nil {
				rows.Close()
				return nil, fmt.Errorf("list the collections of %s: %w", schema, err)
			}
			fields := map[string]bool{"_id": true}
			for _, f := range twinFields[coll] {
				fields[f] = true
			}
			want[table{schema, tbl}] = fields
			colls[table{schema, tbl}] = coll
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			if gone(err) {
				continue
			}
			return nil, fmt.Errorf("list the collections of %s: %w", schema, err)
		}
	}
	// The options are read from pg_class, not from the definition's
	// text: pg_get_indexdef prints fastupdate=off unquoted, and a check of
	// the text for twinOptions as written had every twin dropped and made
	// again every twinInterval (a rebuild of the tasks' GIN indexes every
	// 2 s, 20 % of a core at 100,000 tasks, and the writes of the table
	// held meanwhile).
	rows, err := conn.Query(ctx, `SELECT i.schemaname, i.tablename, i.indexname, i.indexdef, coalesce(c.reloptions, '{}')
		FROM pg_indexes i JOIN pg_namespace n ON n.nspname = i.schemaname JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = i.indexname
		WHERE i.indexname LIKE '%\_dentwin' AND ($1 = '' OR i.schemaname = $1)`, db)
	if err != nil {
		return nil, fmt.Errorf("list the indexes: %w", err)
	}
	plan := map[string]*twinWork{}
	work := func(schema string) *twinWork {
		if plan[schema] == nil {
			plan[schema] = &twinWork{}
		}
		return plan[schema]
	}
	have := map[table]map[string]string{} // field -> twin's name, if current
	for rows.Next() {
		var schema, tbl, name, def string
		var opts []string
		if err := rows.Scan(&schema, &tbl, &name, &def, &opts); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list the indexes: %w", err)
		}
		t := table{schema, tbl}
		if !slices.Contains(opts, twinReloption) || strings.Contains(def, "jsonb_path_ops") {
			// Made by an earlier den: made again as it is made now.
			work(schema).drop = append(work(schema).drop, name)
			continue
		}
		if m := indexField.FindStringSubmatch(def); m != nil {
			if have[t] == nil {
				have[t] = map[string]string{}
			}
			have[t][strings.ReplaceAll(m[1], "''", "'")] = name
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list the indexes: %w", err)
	}
	for t, fields := range want {
		for f := range fields {
			if _, ok := have[t][f]; !ok {
				work(t.schema).make = append(work(t.schema).make, twinSpec{t.name, f})
			}
		}
	}
	for t, fields := range have {
		for f, name := range fields {
			if !want[t][f] {
				work(t.schema).drop = append(work(t.schema).drop, name)
			}
		}
	}
	if err := planFast(ctx, conn, db, colls, work); err != nil {
		return nil, err
	}
	return plan, nil
}

// catalogRace reports whether err is PostgreSQL's "cache lookup failed":
// pg_indexes' definitions are read from the catalog's caches, not the
// query's snapshot, so an index or table made or dropped while the list
// is read (a collection dropped, a twin being made by another connection)
// fails the read. Reading again sees the catalog settled.
func catalogRace(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "XX000" && strings.Contains(pe.Message, "cache lookup failed")
}

// gone reports whether err is PostgreSQL's for a table or schema that does
// not exist.
func gone(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "42P01" || pe.Code == "3F000")
}

// apply makes and drops the twins of schema that w says (and the fast
// paths' indexes and tallies, telling log when that takes a while).
func (w *twinWork) apply(ctx context.Context, conn *pgx.Conn, schema string, log io.Writer) (made, dropped int, err error) {
	for _, name := range w.drop {
		if _, err := conn.Exec(ctx, `DROP INDEX IF EXISTS `+pgx.Identifier{schema, name}.Sanitize()); err != nil {
			return made, dropped, fmt.Errorf("drop index %s.%s: %w", schema, name, err)
		}
		dropped++
	}
	for _, t := range w.make {
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s USING gin ((_jsonb -> %s)) WITH (%s)`,
			pgx.Identifier{twinName(t.table, t.field)}.Sanitize(), pgx.Identifier{schema, t.table}.Sanitize(), quoteLiteral(t.field), twinOptions)
		if _, err := conn.Exec(ctx, q); err != nil {
			return made, dropped, fmt.Errorf("index %s.%s on %q: %w", schema, t.table, t.field, err)
		}
		made++
	}
	if err := w.applyFast(ctx, conn, schema, log); err != nil {
		return made, dropped, err
	}
	return made, dropped, nil
}

// ensureTwins makes the missing twins of every FerretDB collection in the
// database conn is connected to, and drops those no longer wanted: of
// MongoDB database db only, or of all of them when db is "". It returns
// how many it made and dropped. No command may run meanwhile in the
// databases it changes (a collection dropped under it fails it).
func ensureTwins(ctx context.Context, conn *pgx.Conn, db string, log io.Writer) (made, dropped int, err error) {
	plan, err := planTwins(ctx, conn, db)
	for try := 1; try < 3 && catalogRace(err); try++ {
		plan, err = planTwins(ctx, conn, db)
	}
	if err != nil {
		return 0, 0, err
	}
	for schema, w := range plan {
		m, d, err := w.apply(ctx, conn, schema, log)
		made, dropped = made+m, dropped+d
		if err != nil {
			return made, dropped, err
		}
	}
	return made, dropped, nil
}

// collectStrings returns the one text column of a query's rows.
func collectStrings(ctx context.Context, conn *pgx.Conn, q string, args ...any) ([]string, error) {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// twinName names the twin of a table's field: within PostgreSQL's 63
// bytes whatever the names' lengths, and unique per table and field.
func twinName(table, field string) string {
	h := fnv.New32a()
	h.Write([]byte(table + "\x00" + field))
	if len(table) > 40 {
		table = table[:40]
	}
	return fmt.Sprintf("%s_%08x%s", table, h.Sum32(), twinSuffix)
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// twinInterval is how often the twins are brought up to date besides after
// each createIndexes and create: a collection made by its first insert gets
// FerretDB's _id index then, and no command names it.
const twinInterval = 2 * time.Second

// twinLockWait is the longest a twin's CREATE or DROP INDEX waits for its
// table's lock (PostgreSQL's lock_timeout on the keeper's connection).
const twinLockWait = 2 * time.Second

// twinKeeper keeps the GIN twins up to date while the server runs.
type twinKeeper struct {
	mu      sync.Mutex      // commands of several databases may call update at once
	conn    *pgx.Conn       // under mu; made again when closed (a PostgreSQL restarted)
	config  *pgx.ConnConfig // what conn is made from
	logOut  io.Writer
	lastErr string // under mu
	done    chan struct{}
}

// startTwins makes the twins of the tables that exist, then keeps them up
// to date: those of a database after every createIndexes and create that
// p forwards in it (under its lock, so the next command finds them), and
// every twinInterval those that lack some (sweep), until ctx is done.
func startTwins(ctx context.Context, url string, p *proxy, logOut io.Writer) (*twinKeeper, error) {
	config, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("devdb: PostgreSQL indexes: %w", err)
	}
	// Index upkeep runs under a database's proxy lock, so it must never
	// wait on a PostgreSQL lock for long: a table lock held by another
	// connection (a FerretDB statement, or anyone's) would otherwise
	// stop every command of that database for as long as it is held.
	// Past twinLockWait the statement fails and the next sweep tries again.
	config.RuntimeParams["lock_timeout"] = strconv.FormatInt(twinLockWait.Milliseconds(), 10)
	k := &twinKeeper{config: config, logOut: logOut, done: make(chan struct{})}
	conn, err := k.connection(ctx)
	if err != nil {
		return nil, fmt.Errorf("devdb: connect to PostgreSQL for its indexes: %w", err)
	}
	// The tally's functions as this den has them, before any table's
	// tally is looked at: a data directory of an earlier den keeps its
	// tallies, and their triggers call these.
	if err := setupTally(ctx, conn); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("devdb: PostgreSQL indexes: %w", err)
	}
	if _, _, err := ensureTwins(ctx, conn, "", logOut); err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("devdb: PostgreSQL indexes: %w", err)
	}
	p.after = func(db, name string) {
		if (name == "createIndexes" || name == "create") && db != "" {
			k.update(ctx, db)
		}
	}
	go func() {
		defer close(k.done)
		defer func() {
			k.mu.Lock()
			defer k.mu.Unlock()
			if k.conn != nil {
				k.conn.Close(context.Background())
			}
		}()
		t := time.NewTicker(twinInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if p.backend == nil || !p.backend.isDown() {
					k.sweep(ctx, p)
				}
			}
		}
	}()
	return k, nil
}

// connection returns the keeper's connection, made again if the last one
// was closed (its server died); k.mu is held, or the keeper not yet
// started.
func (k *twinKeeper) connection(ctx context.Context) (*pgx.Conn, error) {
	if k.conn != nil && !k.conn.IsClosed() {
		return k.conn, nil
	}
	conn, err := pgx.ConnectConfig(ctx, k.config.Copy())
	if err != nil {
		return nil, err
	}
	k.conn = conn
	return conn, nil
}

// withConn runs fn on the keeper's connection, and once more on a new one
// when the connection broke under it (its server was restarted since it
// was made); k.mu is held.
func (k *twinKeeper) withConn(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := k.connection(ctx)
	if err != nil {
		return err
	}
	err = fn(conn)
	if err != nil && conn.IsClosed() && ctx.Err() == nil {
		if conn, err2 := k.connection(ctx); err2 == nil {
			err = fn(conn)
		}
	}
	return err
}

// sweep brings up to date the twins of every database that needs it: it
// looks without any lock, then updates each such database under its lock,
// in the order of their names, leaving a database whose lock a command
// holds or waits for to the next sweep: it never waits behind a long
// command, nor holds up the commands of other databases. (Not with k.mu
// held: a command's after takes k.mu under its database's lock.)
func (k *twinKeeper) sweep(ctx context.Context, p *proxy) {
	k.mu.Lock()
	var plan map[string]*twinWork
	err := ctx.Err()
	if err == nil {
		err = k.withConn(ctx, func(conn *pgx.Conn) (err error) {
			plan, err = planTwins(ctx, conn, "")
			return err
		})
	}
	if err == nil {
		err = k.withConn(ctx, func(conn *pgx.Conn) error { return dropOrphanTallies(ctx, conn) })
	}
	if err != nil || len(plan) == 0 {
		k.report(ctx, err)
	}
	k.mu.Unlock()
	for _, db := range slices.Sorted(maps.Keys(plan)) {
		p.tryLockedDB(db, func() { k.update(ctx, db) })
	}
}

// update brings the twins of database db ("": all) up to date, telling
// the log when it fails and when it works again (not every time).
func (k *twinKeeper) update(ctx context.Context, db string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ctx.Err() != nil {
		return // stopping: conn may be closed
	}
	err := k.withConn(ctx, func(conn *pgx.Conn) error {
		_, _, err := ensureTwins(ctx, conn, db, k.logOut)
		return err
	})
	k.report(ctx, err)
}

// report tells the log when keeping the twins starts failing and when it
// works again; k.mu is held.
func (k *twinKeeper) report(ctx context.Context, err error) {
	msg := ""
	if err != nil && ctx.Err() == nil {
		msg = err.Error()
	}
	switch {
	case msg != "" && msg != k.lastErr:
		fmt.Fprintf(k.logOut, "devdb: PostgreSQL indexes: %s (queries are slower until this clears)\n", msg)
	case msg == "" && k.lastErr != "":
		fmt.Fprintln(k.logOut, "devdb: PostgreSQL indexes: up to date again")
	}
	k.lastErr = msg
}

// wait waits until the keeper has stopped (its ctx done).
func (k *twinKeeper) wait() { <-k.done }
