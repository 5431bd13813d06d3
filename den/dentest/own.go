package dentest

import (
	"os"
	"path/filepath"
	"testing"
)

// OwnServer returns the URI of an embedded server of the calling test's
// own, stopped when the test ends: for a test whose database (hundreds of
// megabytes, documents of 16 MiB) would slow every other test of the
// package, since the embedded server runs one write at a time and scans
// whole collections. Against DEN_TEST_MONGODB_URI it returns that URI:
// MongoDB runs commands side by side.
func OwnServer(t testing.TB) string {
	t.Helper()
	if os.Getenv(EnvURI) != "" {
		return URI()
	}
	bin, err := BuildDen(t.TempDir())
	if err != nil {
		t.Fatalf("dentest: own server: %v", err)
	}
	p, err := startDevdb(bin, filepath.Join(t.TempDir(), "db"), t.Name()+"'s own server", GiveUp())
	if err != nil {
		t.Fatalf("dentest: own server: %v", err)
	}
	t.Cleanup(p.stop)
	return p.uri
}
