package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The library directories' programs: an ELF program among shared objects
// is listed alone, a directory of programs and no shared object as a
// whole; shared objects, and directories that hold them, never.
func TestScanLibraryPrograms(t *testing.T) {
	t.Parallel()
	libc, _ := filepath.Glob("/usr/lib/*/libc.so.6")
	if len(libc) == 0 {
		t.Skip("no glibc here")
	}
	root := t.TempDir()
	mk := func(path, from string, mode os.FileMode) {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("lib/libc.so.6", libc[0], 0o755)         // a shared object, executable as glibc's is
	mk("lib/helper", "/usr/bin/env", 0o755)     // a program among shared objects
	mk("lib/notes.txt", "/etc/hostname", 0o755) // not ELF
	mk("lib/unset", "/usr/bin/env", 0o644)      // no execute bit
	mk("vendor/bin/python3.12", "/usr/bin/env", 0o755)
	mk("vendor/bin/run.sh", "/etc/hostname", 0o755) // a script beside it
	mk("vendor/lib/libv.so.1", libc[0], 0o644)
	mk("tools/a", "/usr/bin/env", 0o755)
	mk("tools/sub/b", "/usr/bin/env", 0o755)
	got := scanLibraryPrograms([]string{root})
	want := []string{filepath.Join(root, "lib/helper"), filepath.Join(root, "tools"), filepath.Join(root, "vendor/bin")}
	if !slices.Equal(got, want) {
		t.Fatalf("scan = %q, want %q", got, want)
	}
}

// The list is kept between processes only in den's user's own directory:
// one another user made first (den-<euid> under a world-writable /tmp),
// holding a list that would leave every program executable, is not read.
// Not parallel: it sets TMPDIR.
func TestLibraryProgramsCacheOnlyInItsOwnDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the test gives a directory to another user: it needs root")
	}
	tmp := t.TempDir()
	os.Chmod(tmp, 0o1777)
	t.Setenv("TMPDIR", tmp)
	dir := filepath.Join(tmp, fmt.Sprintf("den-%d", os.Geteuid()))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	poison := libProgramsCache{Key: libProgramsKey(LibraryDirs()), Made: time.Now(), List: []string{}}
	b, _ := json.Marshal(poison)
	if err := os.WriteFile(filepath.Join(dir, libProgramsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, ok := readLibProgramsCache(); ok {
		t.Fatal("a list in a directory of another user's was read")
	}
	writeLibProgramsCache(libProgramsCache{Key: "k", Made: time.Now(), List: []string{"/x"}})
	if b, _ := os.ReadFile(filepath.Join(dir, libProgramsFile)); !strings.Contains(string(b), `"list":[]`) {
		t.Fatalf("a list was written into a directory of another user's: %s", b)
	}
	// Its own: read back what it wrote.
	if err := os.Chown(dir, os.Geteuid(), os.Getegid()); err != nil {
		t.Fatal(err)
	}
	writeLibProgramsCache(libProgramsCache{Key: "k", Made: time.Now(), List: []string{"/x"}})
	if c, ok := readLibProgramsCache(); !ok || c.Key != "k" || !slices.Equal(c.List, []string{"/x"}) {
		t.Fatalf("its own list: %+v, %v", c, ok)
	}
}
