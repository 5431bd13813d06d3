package devdb

import "testing"

// Start's decisions, as pure functions: where it listens and the SQLite
// URL it hands FerretDB.
func TestStartDecisions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", "127.0.0.1:0"},
		{"127.0.0.1:27017", "127.0.0.1:27017"},
		{":0", ":0"},
	} {
		if got := listenAddress(c.in); got != c.want {
			t.Errorf("listenAddress(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct{ dir, want string }{
		{"/var/lib/den", "file:/var/lib/den/?_pragma=synchronous(normal)"},
		{"/var/lib/den/", "file:/var/lib/den/?_pragma=synchronous(normal)"},
	} {
		if got := sqliteURL(c.dir); got != c.want {
			t.Errorf("sqliteURL(%q) = %q, want %q", c.dir, got, c.want)
		}
	}
	if _, _, err := openDir(""); err == nil {
		t.Error("openDir with no directory: no error")
	}
}
