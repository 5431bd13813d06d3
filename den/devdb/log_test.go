package devdb

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestServerLogDropsFailedStatements(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(newServerLog(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelError}))).With("name", "postgresql")
	log.Error("Query", "sql", "INSERT INTO t VALUES ($1)", "err", "duplicate key value violates unique constraint")
	log.Error("cannot connect", "err", "connection refused")
	log.Warn("below the level")
	got := out.String()
	if strings.Contains(got, "INSERT") {
		t.Errorf("a failed statement's line was logged: %q", got)
	}
	if !strings.Contains(got, "cannot connect") || !strings.Contains(got, "name=postgresql") {
		t.Errorf("another error was not logged with its attributes: %q", got)
	}
	if strings.Contains(got, "below the level") {
		t.Errorf("a warning was logged: %q", got)
	}
}
