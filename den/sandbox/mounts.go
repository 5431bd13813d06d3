package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The dynamic loader, run as a program (ld-linux-x86-64.so.2 FILE), maps
// FILE for execution itself: Landlock's execute right, which governs
// execve, does not see that. What the kernel does refuse is mapping a file
// for execution from a mount that is noexec. So in the program's own
// mount namespace every mount is made noexec, and only the paths the
// program must execute or map for execution are mounted again (bind
// mounts on themselves) without noexec: the allowed files and
// directories, the loaders, and the library directories. The loader then
// cannot load a program that is not allowed, nor one the task wrote
// anywhere it can write.

// libraryDirs are where the loader looks for shared libraries, besides
// what /etc/ld.so.conf adds.
var libraryDirs = []string{
	"/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib", "/usr/local/lib64",
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
}

// LibraryDirs returns the library directories of this system that exist:
// libraryDirs and the directories /etc/ld.so.conf and its includes name.
// Symbolic links are resolved.
func LibraryDirs() []string {
	dirs := slices.Clone(libraryDirs)
	dirs = append(dirs, ldSoConf("/etc/ld.so.conf", 0)...)
	var out []string
	for _, d := range dirs {
		real, err := filepath.EvalSymlinks(d)
		if err != nil {
			continue
		}
		if st, err := os.Stat(real); err == nil && st.IsDir() && !slices.Contains(out, real) {
			out = append(out, real)
		}
	}
	return out
}

// ldSoConf returns the directories an ld.so.conf file names, following
// its include lines a few levels deep.
func ldSoConf(path string, depth int) []string {
	f, err := os.Open(path)
	if err != nil || depth > 4 {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if pattern, ok := strings.CutPrefix(line, "include "); ok {
			pattern = strings.TrimSpace(pattern)
			if !filepath.IsAbs(pattern) {
				pattern = filepath.Join(filepath.Dir(path), pattern)
			}
			matches, _ := filepath.Glob(pattern)
			for _, m := range matches {
				dirs = append(dirs, ldSoConf(m, depth+1)...)
			}
		} else if filepath.IsAbs(line) {
			dirs = append(dirs, line)
		}
	}
	return dirs
}

// perMountFlags are the flags of a mount (not of its file system) that a
// bind remount sets, from statfs(2)'s f_flags.
var perMountFlags = []struct{ st, ms uintptr }{
	{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
	{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME},
	{unix.ST_RELATIME, unix.MS_RELATIME},
}

// mountFlags returns the per-mount flags of the mount path is on.
func mountFlags(path string) (uintptr, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, err
	}
	var flags uintptr
	for _, f := range perMountFlags {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	return flags, nil
}

// remount sets path's mount's flags, keeping those it has but noexec,
// which it sets when noexec is true.
func remount(path string, noexec bool) error {
	flags, err := mountFlags(path)
	if err != nil {
		return err
	}
	flags &^= unix.MS_NOEXEC
	if noexec {
		flags |= unix.MS_NOEXEC
	}
	return unix.Mount("", path, "", unix.MS_BIND|unix.MS_REMOUNT|flags, "")
}

// mountPoints lists this mount namespace's mount points, from
// /proc/self/mountinfo.
func mountPoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("list mounts: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMountinfo(f[4])
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// confineExec makes every mount of this process's mount namespace noexec,
// then mounts each of keep (files or directories; symbolic links resolved,
// those missing skipped) on itself without noexec. It fails rather than
// leave a mount it could not make noexec.
func confineExec(keep []string) error {
	points, err := mountPoints()
	if err != nil {
		return err
	}
	for _, p := range points {
		if err := remount(p, true); err != nil {
			// A mount point under another mount is hidden by it, and
			// gone with it.
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("make mount %s noexec: %w", p, err)
		}
	}
	var done []string
	for _, k := range keep {
		real, err := filepath.EvalSymlinks(k)
		if err != nil || slices.Contains(done, real) {
			continue
		}
		done = append(done, real)
		if err := unix.Mount(real, real, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount %s on itself: %w", real, err)
		}
		if err := remount(real, false); err != nil {
			return fmt.Errorf("make %s executable: %w", real, err)
		}
	}
	return nil
}

// confineLibraryPrograms mounts each of programs (LibraryPrograms: ELF
// programs, and directories of them, in the library directories that
// confineExec left executable) on itself noexec, but those allow (the
// task's Exec) lets be executed: one that lies below an allowed path is
// left alone, and an allowed path below a directory of programs is
// mounted on itself again, executable. A program that is gone since the
// list was made is skipped.
func confineLibraryPrograms(programs, allow []string) error {
	var allowed []string
	for _, a := range allow {
		if real, err := filepath.EvalSymlinks(a); err == nil {
			allowed = append(allowed, real)
		}
	}
	var again []string
	for _, p := range programs {
		if slices.ContainsFunc(allowed, func(a string) bool { return under(p, a) }) {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND, ""); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("mount %s on itself: %w", p, err)
		}
		if err := remount(p, true); err != nil {
			return fmt.Errorf("make %s noexec: %w", p, err)
		}
		for _, a := range allowed {
			if under(a, p) && !slices.Contains(again, a) {
				again = append(again, a)
			}
		}
	}
	for _, a := range again {
		if err := unix.Mount(a, a, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mount %s on itself: %w", a, err)
		}
		if err := remount(a, false); err != nil {
			return fmt.Errorf("make %s executable: %w", a, err)
		}
	}
	return nil
}
