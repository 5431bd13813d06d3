package devdb

import "github.com/den-project/den/den/internal/wire"

// Which commands take their database's lock.
//
// The lock exists for the writes: FerretDB's findAndModify reads, then
// writes by _id, so two at once could both take the same task; one command
// at a time per database makes every single-document write atomic. A read
// changes nothing, so it needs no lock: it sees each document as some
// write left it, as a read on MongoDB does (MongoDB does not give a find
// one snapshot either). Holding the lock for reads made every view of a
// large database stop the node's claims for as long as FerretDB decoded
// the collection (three watchers of a page stopped a drain). So the
// commands below run beside the writes, neither waiting for them nor
// holding them up; every other command, and any command this list does not
// know, takes the lock.

// readCommands are the commands that change no data: FerretDB 1.24's
// reads, its diagnostics, and the ones a driver sends about its session.
// killCursors and endSessions change a cursor's or session's state, which
// no write depends on.
var readCommands = map[string]bool{
	"find": true, "getMore": true, "count": true, "distinct": true, "aggregate": true,
	"listCollections": true, "listIndexes": true, "listDatabases": true,
	"dbStats": true, "dbstats": true, "collStats": true, "dataSize": true, "explain": true,
	"buildInfo": true, "buildinfo": true, "ping": true, "hello": true, "isMaster": true, "ismaster": true,
	"serverStatus": true, "hostInfo": true, "whatsmyuri": true, "connectionStatus": true,
	"getParameter": true, "getCmdLineOpts": true, "getLog": true, "listCommands": true,
	"currentOp": true, "getFreeMonitoringStatus": true,
	"killCursors": true, "endSessions": true,
	"saslStart": true, "saslContinue": true, "logout": true,
}

// writingStages are the aggregation stages that write: an aggregate with
// one takes the lock (FerretDB 1.24 has neither yet).
var writingStages = map[string]bool{"$out": true, "$merge": true}

// readOnly reports whether the request req, a command named name, changes
// no data, so that it may run without its database's lock: a command of
// readCommands, an aggregate only when no stage of its pipeline writes.
// A request that cannot be read whole is not.
func readOnly(name string, req []byte) bool {
	if !readCommands[name] {
		return false
	}
	if name != "aggregate" {
		return true
	}
	body := wire.Body(req)
	if body == nil {
		return false
	}
	pipeline, ok := body.Lookup("pipeline").ArrayOK()
	if !ok {
		return true // FerretDB refuses it: nothing is written
	}
	values, err := pipeline.Values()
	if err != nil {
		return false
	}
	for _, v := range values {
		stage, ok := v.DocumentOK()
		if !ok {
			continue // refused
		}
		elems, err := stage.Elements()
		if err != nil {
			return false
		}
		for _, e := range elems {
			if writingStages[e.Key()] {
				return false
			}
		}
	}
	return true
}
