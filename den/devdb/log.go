package devdb

import (
	"context"
	"log/slog"
)

// serverLog is the handler of FerretDB's log: errors only, less the
// PostgreSQL driver's line for each statement that failed (message
// "Query"). Those are a client's errors (a duplicate key, a command the
// client gave up on), which FerretDB answers the client with: on the log
// they repeat each one with every argument of the statement, hundreds of
// lines for one insert of a test's hostile corpus.
type serverLog struct{ slog.Handler }

// newServerLog returns the handler for FerretDB's log, written to h.
func newServerLog(h slog.Handler) serverLog { return serverLog{h} }

// Handle drops the driver's failed-statement lines and passes on the rest.
func (l serverLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "Query" {
		return nil
	}
	return l.Handler.Handle(ctx, r)
}

// WithAttrs and WithGroup keep the filter on the handlers derived from l.
func (l serverLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return serverLog{l.Handler.WithAttrs(attrs)}
}

// WithGroup: see WithAttrs.
func (l serverLog) WithGroup(name string) slog.Handler { return serverLog{l.Handler.WithGroup(name)} }
