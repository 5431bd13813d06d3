package devdb

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// What the fast paths (fastpath.go) read in PostgreSQL besides FerretDB's
// tables, made and kept by the same keeper as the twins (pgindexes.go):
//
//   - list indexes: btree indexes on a collection's table that give its
//     rows in _id order for a field's value, so that a page of a list
//     ("the newest 50 tasks of this queue that failed") is read from an
//     index, whatever the collection holds besides;
//   - the tally: per collection, how many documents hold each combination
//     of a few fields' values (a task's queue, status and node), kept by
//     triggers on the table in the same transaction as every write, so
//     that counts by group are read from a few rows instead of every
//     document (PostgreSQL cannot read an expression from an index alone,
//     so a GROUP BY over the table reads every row: 600 ms for 100,000
//     tasks, using both cores).

// fastSpec is what the fast paths keep for one collection.
type fastSpec struct {
	// fields are the top-level fields the list indexes and the tally
	// are on, in the tally's order.
	fields []string
	// lists are the list indexes: each the fields it is on, then _id.
	lists [][]string
}

// fastSpecs are the collections the fast paths serve.
var fastSpecs = map[string]fastSpec{
	"tasks": {
		fields: []string{"queue", "status", "node"},
		lists:  [][]string{{"queue", "status"}, {"queue"}, {"status"}, {"node", "status"}, {"node"}},
	},
}

// listSuffix ends the name of every list index, statSuffix of every
// statistics object.
const (
	listSuffix = "_denlist"
	statSuffix = "_denstat"
)

// The SQL expressions the fast paths and the indexes share: PostgreSQL uses
// an index for a query only when the query names the index's very
// expression.
const (
	// sqlID is a document's _id, the order of every list.
	sqlID = `(_jsonb -> '_id')`
	// sqlIDType is the BSON type of a document's _id, from FerretDB's
	// schema of the document ($s).
	sqlIDType = `(_jsonb #>> '{$s,p,_id,t}')`
	// sqlOddID holds for the documents whose _id is not an ObjectId: they
	// have an index of their own, since the lists order ObjectIds only.
	sqlOddID = `(` + sqlIDType + ` <> 'objectId')`
)

// sqlField is the SQL expression of a top-level field's value.
func sqlField(f string) string { return "(_jsonb -> " + quoteLiteral(f) + ")" }

// sqlArrays holds for the documents where one of fields holds an array:
// they have an index of their own, since an equality matches an array
// that holds the value, which no btree on the field finds.
func sqlArrays(fields []string) string {
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = "jsonb_typeof" + sqlField(f) + " = 'array'"
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}

// listIndex is one list index to make: its table and definition (columns
// and predicate, after ON table).
type listIndex struct{ table, def string }

// listIndexes are the list indexes of a collection's table.
func listIndexes(table string, spec fastSpec) []listIndex {
	var out []listIndex
	for _, fields := range spec.lists {
		cols := make([]string, 0, len(fields)+1)
		for _, f := range fields {
			cols = append(cols, sqlField(f))
		}
		out = append(out, listIndex{table, "(" + strings.Join(append(cols, sqlID), ", ") + ")"})
	}
	return append(out,
		listIndex{table, "(" + sqlID + ") WHERE " + sqlOddID},
		listIndex{table, "(" + sqlID + ") WHERE " + sqlArrays(spec.fields)})
}

// name names a list index after its table and definition: a definition
// changed by a later den is a new index, and the old one is dropped.
func (l listIndex) name() string { return fastName(l.table, l.def, listSuffix) }

// fastName names an object of the fast paths on table after its
// definition, within PostgreSQL's 63 bytes.
func fastName(table, def, suffix string) string {
	h := fnv.New32a()
	h.Write([]byte(table + "\x00" + def))
	if len(table) > 40 {
		table = table[:40]
	}
	return fmt.Sprintf("%s_%08x%s", table, h.Sum32(), suffix)
}

// The planner's statistics on the expressions of the partial indexes'
// predicates: without them PostgreSQL takes an _id that is no ObjectId,
// or an array in a field, for what 99.5 % of the tasks hold (its default
// for an expression it knows nothing of), and scans the whole table for
// the one it expects at once (270 ms for 100,000 tasks, instead of 0.1
// ms from the partial index that holds none). PostgreSQL 14 and later;
// on an earlier one the fast paths go on without them.

// pgStat is one statistics object to make: its table and expression.
type pgStat struct{ table, expr string }

// name names a statistics object after its table and expression.
func (st pgStat) name() string { return fastName(st.table, st.expr, statSuffix) }

// fastStats are the statistics objects of a collection's table, on
// PostgreSQL of version (server_version_num).
func fastStats(table string, spec fastSpec, version int) []pgStat {
	if version < 140000 {
		return nil
	}
	out := []pgStat{{table, sqlIDType}}
	for _, f := range spec.fields {
		out = append(out, pgStat{table, "jsonb_typeof" + sqlField(f)})
	}
	return out
}

// The tally's triggers, one per kind of write.
var tallyTriggers = []string{"den_tally_ins", "den_tally_upd", "den_tally_del", "den_tally_trunc"}

// tallySetup makes the tally's table and functions, or brings the
// functions up to date, in the schema den$devdb: no MongoDB database's
// (FerretDB keeps a database in the schema of its name, which has no $).
// The table holds, per FerretDB table (tbl, its oid) and combination of
// the three fields' values (q, s, nd) and types (qt, st, ndt: FerretDB's
// type of the value; "" for a missing field; the type and "!" for a value
// the tally does not keep, an array, a document, a long string, kept as
// null), how many rows hold it (n): one row per combination, updated in
// place in the writer's transaction, so that a reader reads as many rows
// as there are combinations, however many writes there were, and counts
// stay exact whatever rolls back (a rolled-back write's change of n goes
// with it) and whoever writes at once (each change of n holds its row's
// lock to the end of its transaction; rows are changed in key order, so
// two writers cannot deadlock on them; TestTallyExactUnderConcurrentWrites).
//
// What a write pays for it (docs/performance.md, "10,000-task drain"),
// measured as the trigger's time in EXPLAIN ANALYZE of an UPDATE of one
// task:
//
//   - The trigger functions plan their statements once (plan_cache_mode
//     force_generic_plan, set on each function): den dev's PostgreSQL
//     runs with force_custom_plan for FerretDB's statements
//     (postgres.go), under which PL/pgSQL plans a statement that names a
//     variable (TG_RELID) again at every call: 0.8 to 1.3 ms a trigger
//     call, most of what the tally cost a claim. Planned once: about 0.1
//     ms.
//   - A row's key (tallyKeyOf) reads its document once: each read of a
//     jsonb value stored out of line (TOAST: a task with a large output)
//     fetches and decompresses it whole, and the key computed as one
//     expression per column read it some 50 times a row (100 to 200 ms
//     for an update of a task of 1 MB; 0.5 ms now).
//
// The counts kept instead as appended deltas (a row per change, summed by
// the reader, folded by a compaction) measured about the same per write
// once planned (0.06 to 0.1 ms, against 0.07 to 0.15): rows updated in
// place are not what made the writes slow. Writers do not wait on one
// another's rows either (den dev's proxy forwards one write at a time per
// database, and each database's tables have rows of their own); only the
// old versions of a row updated many times while a long read holds its
// snapshot make each update walk further (0.05 to 0.1 ms more after 1,500
// updates under one snapshot), until the read ends.
var tallySetup = []string{
	`CREATE SCHEMA IF NOT EXISTS "den$devdb"`,
	`CREATE TABLE IF NOT EXISTS "den$devdb".tally (
		tbl oid NOT NULL,
		q jsonb NOT NULL, qt text NOT NULL,
		s jsonb NOT NULL, st text NOT NULL,
		nd jsonb NOT NULL, ndt text NOT NULL,
		n bigint NOT NULL,
		UNIQUE (tbl, q, qt, s, st, nd, ndt))`,
	`CREATE OR REPLACE FUNCTION "den$devdb".tally_ins() RETURNS trigger LANGUAGE plpgsql
	SET plan_cache_mode = force_generic_plan AS $$
	BEGIN
		INSERT INTO "den$devdb".tally AS t (tbl, q, qt, s, st, nd, ndt, n)
		SELECT TG_RELID, ` + tallyCols + `, count(*) FROM new_rows r CROSS JOIN ` + tallyKeyOf("r") + `
		GROUP BY 2, 3, 4, 5, 6, 7 ORDER BY 2, 3, 4, 5, 6, 7
		ON CONFLICT (tbl, q, qt, s, st, nd, ndt) DO UPDATE SET n = t.n + EXCLUDED.n;
		RETURN NULL;
	END $$`,
	`CREATE OR REPLACE FUNCTION "den$devdb".tally_del() RETURNS trigger LANGUAGE plpgsql
	SET plan_cache_mode = force_generic_plan AS $$
	BEGIN
		INSERT INTO "den$devdb".tally AS t (tbl, q, qt, s, st, nd, ndt, n)
		SELECT TG_RELID, ` + tallyCols + `, -count(*) FROM old_rows r CROSS JOIN ` + tallyKeyOf("r") + `
		GROUP BY 2, 3, 4, 5, 6, 7 ORDER BY 2, 3, 4, 5, 6, 7
		ON CONFLICT (tbl, q, qt, s, st, nd, ndt) DO UPDATE SET n = t.n + EXCLUDED.n;
		RETURN NULL;
	END $$`,
	`CREATE OR REPLACE FUNCTION "den$devdb".tally_upd() RETURNS trigger LANGUAGE plpgsql
	SET plan_cache_mode = force_generic_plan AS $$
	BEGIN
		INSERT INTO "den$devdb".tally AS t (tbl, q, qt, s, st, nd, ndt, n)
		SELECT TG_RELID, q, qt, s, st, nd, ndt, sum(d) FROM (
			SELECT ` + tallyCols + `, -1 AS d FROM old_rows r CROSS JOIN ` + tallyKeyOf("r") + `
			UNION ALL
			SELECT ` + tallyCols + `, 1 AS d FROM new_rows r CROSS JOIN ` + tallyKeyOf("r") + `
		) AS x (q, qt, s, st, nd, ndt, d)
		GROUP BY q, qt, s, st, nd, ndt HAVING sum(d) <> 0 ORDER BY q, qt, s, st, nd, ndt
		ON CONFLICT (tbl, q, qt, s, st, nd, ndt) DO UPDATE SET n = t.n + EXCLUDED.n;
		RETURN NULL;
	END $$`,
	`CREATE OR REPLACE FUNCTION "den$devdb".tally_trunc() RETURNS trigger LANGUAGE plpgsql
	SET plan_cache_mode = force_generic_plan AS $$
	BEGIN
		DELETE FROM "den$devdb".tally WHERE tbl = TG_RELID;
		RETURN NULL;
	END $$`,
	// The key's functions of earlier dens, which tallyKeyOf replaced.
	`DROP FUNCTION IF EXISTS "den$devdb".tally_v(jsonb, text)`,
	`DROP FUNCTION IF EXISTS "den$devdb".tally_t(jsonb, text)`,
}

// tallyCols are the key columns tallyKeyOf gives, for a SELECT list.
const tallyCols = "k.q, k.qt, k.s, k.st, k.nd, k.ndt"

// tallyKeyOf is a LATERAL subquery, k, giving the tally's key columns of
// the row r (tallyCols). Each level is evaluated once per row (OFFSET 0
// keeps the planner from folding it into the next, which would copy its
// expressions into every use): the document, read once (|| with an empty
// object gives back the object itself, read out of its TOAST storage
// once; a FerretDB document is always an object); the properties of its
// schema ($s.p, FerretDB's types of its fields); each field's type as the
// tally keeps it; then each field's value, or null for a missing field or
// a value the tally does not keep.
func tallyKeyOf(r string) string {
	var types, cols []string
	for i, f := range fastSpecs["tasks"].fields {
		lf := quoteLiteral(f)
		types = append(types, fmt.Sprintf(`CASE
			WHEN NOT (d ? %[1]s) THEN ''
			WHEN p -> %[1]s ->> 't' IN ('objectId', 'int', 'long', 'double', 'bool', 'date', 'null') THEN p -> %[1]s ->> 't'
			WHEN p -> %[1]s ->> 't' = 'string' AND octet_length(d ->> %[1]s) <= 256 THEN 'string'
			ELSE coalesce(p -> %[1]s ->> 't', '?') || '!'
		END AS t%[2]d`, lf, i))
		cols = append(cols, fmt.Sprintf(`CASE WHEN t%[2]d = '' OR t%[2]d LIKE '%%!' THEN 'null'::jsonb ELSE d -> %[1]s END, t%[2]d`, lf, i))
	}
	return `LATERAL (SELECT ` + strings.Join(cols, ", ") + ` FROM (
		SELECT d, ` + strings.Join(types, ", ") + ` FROM (
			SELECT d, d -> '$s' -> 'p' AS p FROM (
				SELECT ` + r + `._jsonb || '{}'::jsonb AS d OFFSET 0) AS doc OFFSET 0) AS schema OFFSET 0) AS typed
	) AS k (q, qt, s, st, nd, ndt)`
}

// setupTally makes the tally's table and functions.
func setupTally(ctx context.Context, conn *pgx.Conn) error {
	for _, q := range tallySetup {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("set up the tally: %w", err)
		}
	}
	return nil
}

// makeTally starts the tally of a table: in one transaction, with the
// table's writes held off, it counts the rows as they are and adds the
// triggers that count every write from then on. A reader that finds the
// triggers finds the counts (fastcount.go).
func makeTally(ctx context.Context, conn *pgx.Conn, schema, table string) error {
	ident := pgx.Identifier{schema, table}.Sanitize()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	steps := []string{
		`LOCK TABLE ` + ident + ` IN SHARE ROW EXCLUSIVE MODE`,
		`DELETE FROM "den$devdb".tally WHERE tbl = '` + strings.ReplaceAll(ident, "'", "''") + `'::regclass`,
		`INSERT INTO "den$devdb".tally (tbl, q, qt, s, st, nd, ndt, n)
			SELECT '` + strings.ReplaceAll(ident, "'", "''") + `'::regclass, ` + tallyCols + `, count(*) FROM ` + ident + ` r CROSS JOIN ` + tallyKeyOf("r") + `
			GROUP BY 2, 3, 4, 5, 6, 7`,
		`CREATE TRIGGER den_tally_ins AFTER INSERT ON ` + ident + ` REFERENCING NEW TABLE AS new_rows
			FOR EACH STATEMENT EXECUTE FUNCTION "den$devdb".tally_ins()`,
		`CREATE TRIGGER den_tally_upd AFTER UPDATE ON ` + ident + ` REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
			FOR EACH STATEMENT EXECUTE FUNCTION "den$devdb".tally_upd()`,
		`CREATE TRIGGER den_tally_del AFTER DELETE ON ` + ident + ` REFERENCING OLD TABLE AS old_rows
			FOR EACH STATEMENT EXECUTE FUNCTION "den$devdb".tally_del()`,
		`CREATE TRIGGER den_tally_trunc AFTER TRUNCATE ON ` + ident + `
			FOR EACH STATEMENT EXECUTE FUNCTION "den$devdb".tally_trunc()`,
	}
	for _, q := range steps {
		if _, err := tx.Exec(ctx, q); err != nil {
			return fmt.Errorf("tally of %s: %w", ident, err)
		}
	}
	return tx.Commit(ctx)
}

// applyStats makes and drops the statistics objects w says, and has the
// tables they are made on analyzed.
func (w *twinWork) applyStats(ctx context.Context, conn *pgx.Conn, schema string) error {
	for _, name := range w.statDrop {
		if _, err := conn.Exec(ctx, `DROP STATISTICS IF EXISTS `+pgx.Identifier{schema, name}.Sanitize()); err != nil {
			return fmt.Errorf("drop statistics %s.%s: %w", schema, name, err)
		}
	}
	analyze := map[string]bool{}
	for _, st := range w.statMake {
		q := fmt.Sprintf(`CREATE STATISTICS IF NOT EXISTS %s ON %s FROM %s`, pgx.Identifier{schema, st.name()}.Sanitize(), "("+st.expr+")", pgx.Identifier{schema, st.table}.Sanitize())
		_, err := conn.Exec(ctx, q)
		if err != nil {
			return fmt.Errorf("statistics on %s.%s: %w", schema, st.table, err)
		}
		analyze[st.table] = true
	}
	for _, table := range slices.Sorted(maps.Keys(analyze)) {
		if _, err := conn.Exec(ctx, `ANALYZE `+pgx.Identifier{schema, table}.Sanitize()); err != nil {
			return fmt.Errorf("analyze %s.%s: %w", schema, table, err)
		}
	}
	return nil
}

// tablesOf are the tables of some list indexes.
func tablesOf(ls []listIndex) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.table)
	}
	return out
}

// planFast adds to plan what the fast paths need in the tables of tables
// (each the table of the collection it maps to): missing list indexes and
// tallies, and list indexes no longer wanted (of database db only, or of
// all when db is "").
func planFast(ctx context.Context, conn *pgx.Conn, db string, tables map[pgTable]string, work func(schema string) *twinWork) error {
	have := map[string]bool{} // schema.index
	rows, err := conn.Query(ctx, `SELECT schemaname, indexname FROM pg_indexes WHERE indexname LIKE '%\_denlist' AND ($1 = '' OR schemaname = $1)`, db)
	if err != nil {
		return fmt.Errorf("list the list indexes: %w", err)
	}
	for rows.Next() {
		var schema, name string
		if err := rows.Scan(&schema, &name); err != nil {
			rows.Close()
			return fmt.Errorf("list the list indexes: %w", err)
		}
		have[schema+"."+name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list the list indexes: %w", err)
	}
	haveStats, err := collectStrings(ctx, conn, `SELECT n.nspname || '.' || s.stxname FROM pg_statistic_ext s JOIN pg_namespace n ON n.oid = s.stxnamespace
		WHERE s.stxname LIKE '%\_denstat' AND ($1 = '' OR n.nspname = $1)`, db)
	if err != nil {
		return fmt.Errorf("list the statistics: %w", err)
	}
	for _, k := range haveStats {
		have[k] = true
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return fmt.Errorf("PostgreSQL's version: %w", err)
	}
	tallied := map[pgTable]bool{}
	rows, err = conn.Query(ctx, `SELECT n.nspname, c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.tgname = 'den_tally_ins' AND ($1 = '' OR n.nspname = $1)`, db)
	if err != nil {
		return fmt.Errorf("list the tallies: %w", err)
	}
	for rows.Next() {
		var t pgTable
		if err := rows.Scan(&t.schema, &t.name); err != nil {
			rows.Close()
			return fmt.Errorf("list the tallies: %w", err)
		}
		tallied[t] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list the tallies: %w", err)
	}
	want := map[string]bool{}
	for t, coll := range tables {
		spec, ok := fastSpecs[coll]
		if !ok {
			continue
		}
		for _, l := range listIndexes(t.name, spec) {
			want[t.schema+"."+l.name()] = true
			if !have[t.schema+"."+l.name()] {
				work(t.schema).listMake = append(work(t.schema).listMake, l)
			}
		}
		for _, st := range fastStats(t.name, spec, version) {
			want[t.schema+"."+st.name()] = true
			if !have[t.schema+"."+st.name()] {
				work(t.schema).statMake = append(work(t.schema).statMake, st)
			}
		}
		if !tallied[t] {
			work(t.schema).tally = append(work(t.schema).tally, t.name)
		}
	}
	for k := range have {
		if !want[k] {
			schema, name, _ := strings.Cut(k, ".")
			if strings.HasSuffix(name, statSuffix) {
				work(schema).statDrop = append(work(schema).statDrop, name)
			} else {
				work(schema).listDrop = append(work(schema).listDrop, name)
			}
		}
	}
	return nil
}

// dropOrphanTallies forgets the counts of tables that no longer exist (a
// collection dropped: its triggers went with it).
func dropOrphanTallies(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `DELETE FROM "den$devdb".tally t WHERE NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.tbl)`)
	if gone(err) {
		return nil // no tally yet
	}
	return err
}

// bigTable is how many rows make a table whose indexes and tally take long
// enough to the log (a minute or two per million tasks here).
const bigTable = 50000

// applyFast makes and drops what w says of the fast paths' in schema. It
// tells log first when it indexes or counts a large table: writes in its
// database wait meanwhile, once.
func (w *twinWork) applyFast(ctx context.Context, conn *pgx.Conn, schema string, log io.Writer) error {
	began := time.Now()
	var big []string
	for _, table := range slices.Compact(slices.Sorted(slices.Values(append(w.tally, tablesOf(w.listMake)...)))) {
		var rows float64
		if err := conn.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)`, pgx.Identifier{schema, table}.Sanitize()).Scan(&rows); err == nil && rows > bigTable {
			big = append(big, fmt.Sprintf("%s (%.0f documents)", table, rows))
		}
	}
	if len(big) > 0 {
		fmt.Fprintf(log, "devdb: indexing and counting %s of database %s for the fast paths, once; its writes wait meanwhile\n", strings.Join(big, ", "), schema)
		defer func() {
			fmt.Fprintf(log, "devdb: %s of database %s indexed and counted in %s\n", strings.Join(big, ", "), schema, time.Since(began).Round(time.Second))
		}()
	}
	for _, name := range w.listDrop {
		if _, err := conn.Exec(ctx, `DROP INDEX IF EXISTS `+pgx.Identifier{schema, name}.Sanitize()); err != nil {
			return fmt.Errorf("drop index %s.%s: %w", schema, name, err)
		}
	}
	for _, l := range w.listMake {
		q := fmt.Sprintf(`CREATE INDEX IF NOT EXISTS %s ON %s %s`, pgx.Identifier{l.name()}.Sanitize(), pgx.Identifier{schema, l.table}.Sanitize(), l.def)
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("list index on %s.%s: %w", schema, l.table, err)
		}
	}
	if err := w.applyStats(ctx, conn, schema); err != nil {
		return err
	}
	if len(w.tally) > 0 {
		if err := setupTally(ctx, conn); err != nil {
			return err
		}
	}
	for _, table := range w.tally {
		if err := makeTally(ctx, conn, schema, table); err != nil {
			return err
		}
	}
	return nil
}
