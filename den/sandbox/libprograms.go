package sandbox

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The library directories stay executable in a task's mount namespace
// (mounts.go), since every dynamically linked program maps its shared
// objects from them for execution. But they hold programs too: vendor
// SDKs (a whole Python under /usr/lib/<vendor>), git's helpers
// (/usr/lib/git-core), compilers' (gcc's cc1), LLVM's and PostgreSQL's
// bin directories, JDKs. The dynamic loader run as a program
// (ld-linux-x86-64.so.2 /usr/lib/<vendor>/bin/python3.12) maps such a
// program for execution itself, and Landlock, which governs execve, does
// not see that: it gave a full interpreter command.allow never listed.
//
// So in the task's mount namespace each ELF program found in the library
// directories is mounted again, on itself, noexec (the kernel then
// refuses the loader's mmap(PROT_EXEC) of it, as on any noexec mount),
// unless command.allow lets it be executed; a directory whose files are
// all programs or files that are no shared object (no *.so or *.so.*
// anywhere below it, as git-core, llvm-14/bin) is mounted noexec as a
// whole. Shared objects stay loadable.
//
// An ELF program is an ELF file with an execute bit that is an
// executable (ET_EXEC, static ones included: the loader runs those too)
// or a position-independent one (ET_DYN with an interpreter) not named
// as a shared object. Finding them walks the library directories (about
// 60,000 files, 0.4 s on the development machine once cached by the
// kernel), so the list is kept, in the process (a runner's worker serves
// up to runner.max_tasks tasks) and in a file for the next processes of
// den's user (libProgramsCache), and made again when the library
// directories themselves, the package managers' databases or ld.so.cache
// change, and at least every ten minutes.

// libProgramsMaxAge is the longest a list of library programs is used.
const libProgramsMaxAge = 10 * time.Minute

var libPrograms struct {
	sync.Mutex
	key  string
	made time.Time
	list []string
}

// libProgramsKey changes when a package is installed or removed, when a
// library directory gets or loses an entry of its own, or when ldconfig
// runs.
var libProgramsWitnesses = []string{
	"/var/lib/dpkg/status", "/var/lib/rpm/rpmdb.sqlite", "/var/lib/rpm/Packages", "/lib/apk/db/installed",
	"/etc/ld.so.cache",
}

func libProgramsKey(dirs []string) string {
	var b strings.Builder
	for _, p := range slices.Concat(dirs, libProgramsWitnesses) {
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil {
			fmt.Fprintf(&b, "%s %d.%d %d;", p, st.Mtim.Sec, st.Mtim.Nsec, st.Ino)
		}
	}
	return b.String()
}

// LibraryPrograms returns the ELF programs in the library directories, and
// the directories that hold programs and no shared object, which a task's
// mount namespace makes noexec (Spec.NoExec).
func LibraryPrograms() []string {
	dirs := LibraryDirs()
	key := libProgramsKey(dirs)
	libPrograms.Lock()
	defer libPrograms.Unlock()
	if libPrograms.list != nil && libPrograms.key == key && time.Since(libPrograms.made) < libProgramsMaxAge {
		return libPrograms.list
	}
	if c, ok := readLibProgramsCache(); ok && c.Key == key && time.Since(c.Made) < libProgramsMaxAge && time.Since(c.Made) > -time.Minute {
		libPrograms.list, libPrograms.key, libPrograms.made = c.List, key, c.Made
		return libPrograms.list
	}
	libPrograms.list, libPrograms.key, libPrograms.made = scanLibraryPrograms(dirs), key, time.Now()
	writeLibProgramsCache(libProgramsCache{Key: key, Made: libPrograms.made, List: libPrograms.list})
	return libPrograms.list
}

// libProgramsCache is the list as a file keeps it, in a directory of den's
// user's own (cacheDir), which no other user may write to: a list a task
// could shorten would reopen the hole.
type libProgramsCache struct {
	Key  string    `json:"key"`
	Made time.Time `json:"made"`
	List []string  `json:"list"`
}

const libProgramsFile = "library-programs.json"

// cacheDir returns den's user's own directory under the node's temporary
// directory (den-<euid>, mode 0700), made if need be; an error where it is
// not a directory of this user's, mode 0700 (one another user made first).
func cacheDir() (string, error) {
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("den-%d", os.Geteuid()))
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != uint32(os.Geteuid()) || st.Mode&0o777 != 0o700 {
		return "", fmt.Errorf("%s is not a directory of uid %d with mode 0700", dir, os.Geteuid())
	}
	return dir, nil
}

func readLibProgramsCache() (libProgramsCache, bool) {
	var c libProgramsCache
	dir, err := cacheDir()
	if err != nil {
		return c, false
	}
	b, err := os.ReadFile(filepath.Join(dir, libProgramsFile))
	if err != nil || json.Unmarshal(b, &c) != nil {
		return c, false
	}
	return c, c.List != nil
}

// writeLibProgramsCache writes the list, through a new file renamed into
// place; it gives up silently (the next process walks again).
func writeLibProgramsCache(c libProgramsCache) {
	dir, err := cacheDir()
	if err != nil {
		return
	}
	b, err := json.Marshal(c)
	if err != nil {
		return
	}
	f, err := os.CreateTemp(dir, libProgramsFile+".*")
	if err != nil {
		return
	}
	_, werr := f.Write(b)
	if cerr := f.Close(); werr != nil || cerr != nil || os.Rename(f.Name(), filepath.Join(dir, libProgramsFile)) != nil {
		os.Remove(f.Name())
	}
}

// scanLibraryPrograms walks dirs (not following symbolic links; a
// directory under another of dirs is walked once).
func scanLibraryPrograms(dirs []string) []string {
	type dirInfo struct {
		programs, libraries bool
	}
	info := map[string]*dirInfo{}
	var programs []string
	walked := []string{}
	for _, root := range dirs {
		if slices.ContainsFunc(walked, func(w string) bool { return under(root, w) }) {
			continue
		}
		walked = append(walked, root)
		filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable: nothing the task's user could load either
			}
			if d.IsDir() {
				info[path] = &dirInfo{}
				return nil
			}
			dir := info[filepath.Dir(path)]
			if dir == nil {
				return nil
			}
			if sharedObjectName(d.Name()) {
				dir.libraries = true
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			if fi, err := d.Info(); err != nil || fi.Mode().Perm()&0o111 == 0 || !isProgram(path) {
				return nil
			}
			dir.programs = true
			programs = append(programs, path)
			return nil
		})
	}
	// A directory's libraries and programs count for every directory
	// above it, up to the library directory it is in.
	paths := make([]string, 0, len(info))
	for p := range info {
		paths = append(paths, p)
	}
	slices.SortFunc(paths, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, p := range paths {
		if slices.Contains(dirs, p) {
			continue
		}
		if parent := info[filepath.Dir(p)]; parent != nil {
			parent.programs = parent.programs || info[p].programs
			parent.libraries = parent.libraries || info[p].libraries
		}
	}
	// The highest directories (below a library directory) that hold
	// programs and no shared object; the programs in other directories.
	var out []string
	whole := func(p string) bool {
		d := info[p]
		return d != nil && d.programs && !d.libraries && !slices.Contains(dirs, p)
	}
	for _, p := range paths {
		if whole(p) && !whole(filepath.Dir(p)) {
			out = append(out, p)
		}
	}
	for _, p := range programs {
		if !slices.ContainsFunc(out, func(d string) bool { return under(p, d) }) {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// sharedObjectName reports whether a file's name is a shared object's:
// *.so or *.so.* (libc.so.6, ld-linux-x86-64.so.2, _ssl.cpython-311.so).
func sharedObjectName(name string) bool {
	return strings.HasSuffix(name, ".so") || strings.Contains(name, ".so.")
}

// isProgram reports whether path is an ELF program (see above).
func isProgram(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	switch f.Type {
	case elf.ET_EXEC:
		return true
	case elf.ET_DYN:
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				return true
			}
		}
	}
	return false
}

// under reports whether path is dir or lies below it.
func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}
