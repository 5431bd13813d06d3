package command_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/sandbox"
	"github.com/den-project/den/plugins/command"
)

// perlMemfdLoader writes id into a memfd sealed against execve
// (memfd_create is x86-64's 319, MFD_NOEXEC_SEAL 8) and runs the loader
// on it.
const perlMemfdLoader = `my $name = "x";
my $fd = syscall(319, $name, 8);
if ($fd < 0) { print "memfd_create: $!\n"; exit 0 }
open(my $out, ">&", $fd) or die "dup: $!";
binmode $out;
open(my $in, "<", "/usr/bin/id") or die "open: $!";
binmode $in;
local $/; my $elf = <$in>;
print $out $elf; close $out;
exec {"LOADER"} "ld", "/proc/self/fd/$fd" or print "execve: $!\n";
`

// The loader hole, tried as an attacker would with only exact programs
// allowed (a shell, env and cp; not id): the dynamic loader, which every
// dynamically linked program needs the kernel to execute, run as a
// program loads any ELF file it can map for execution. In the task's
// mount namespace every mount is noexec but the allowed programs, the
// loaders and the library directories, so the loader cannot map a
// program that is not allowed (id), nor one the task wrote (in its
// temporary directory, its working directory, /run/lock), and the kernel
// refuses executing what the task wrote anyway (Landlock).
func TestLoaderRunsNothingNotAllowed(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	needLandlock(t)
	loader := sandbox.Loaders("/usr/bin/id")
	if len(loader) == 0 {
		t.Skip("/usr/bin/id is not a dynamically linked program here")
	}
	ld := loader[0]
	work := hostDir(t)
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	lockCopy := filepath.Join("/run/lock", filepath.Base(work)+"-id")
	t.Cleanup(func() { os.Remove(lockCopy) })
	policy := asTaskUser(command.Policy{Enabled: true, Allow: []string{"/bin/sh", "/usr/bin/dash", "/usr/bin/env", "/usr/bin/cp"}, Shell: true})
	attempts := map[string]string{
		"env runs the loader on id":    `env ` + ld + ` /usr/bin/id`,
		"the shell runs the loader":    ld + ` /usr/bin/id`,
		"id copied to TMPDIR":          `cp /usr/bin/id "$TMPDIR/myid" && ` + ld + ` "$TMPDIR/myid"`,
		"id copied to TMPDIR, run":     `cp /usr/bin/id "$TMPDIR/myid2" && "$TMPDIR/myid2"`,
		"id copied to the working dir": `cp /usr/bin/id ./myid && ` + ld + ` ./myid`,
		"id copied to /run/lock":       `cp /usr/bin/id ` + lockCopy + ` && ` + ld + ` ` + lockCopy,
		"the loader copied":            `cp ` + ld + ` "$TMPDIR/ld" && "$TMPDIR/ld" /usr/bin/id`,
	}
	for name, script := range attempts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := runTask(t, policy, bson.D{{Key: "shell", Value: script}, {Key: "dir", Value: work}})
			stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr")
			if strings.Contains(stdout, "uid=") {
				t.Fatalf("id ran: stdout %q", stdout)
			}
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 2 {
				t.Fatalf("status %d, stderr %q", st, stderr)
			}
			t.Logf("refused: %q", stderr)
		})
	}
	// find allowed alone: find -exec the loader on the shell, as reported.
	t.Run("find -exec the loader on the shell", func(t *testing.T) {
		t.Parallel()
		p := asTaskUser(command.Policy{Enabled: true, Allow: []string{"/usr/bin/find"}})
		raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{"/usr/bin/find", "/usr/bin/find", "-exec", ld, "/usr/bin/dash", "-c", "echo pwned", ";"}}})
		if stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr"); strings.Contains(stdout, "pwned") || !strings.Contains(stderr, "failed to map segment") {
			t.Fatalf("stdout %q, stderr %q; want the loader's mapping refused", stdout, stderr)
		}
	})
	// The same with a memfd, sealed against execve (MFD_NOEXEC_SEAL), which
	// the loader could still map for execution: perl, allowed alone, makes
	// one, copies id into it and runs the loader on /proc/self/fd/N.
	if _, err := os.Stat("/usr/bin/perl"); err == nil && runtime.GOARCH == "amd64" {
		t.Run("a memfd given to the loader", func(t *testing.T) {
			t.Parallel()
			p := asTaskUser(command.Policy{Enabled: true, Allow: []string{"/usr/bin/perl"}})
			raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{"/usr/bin/perl", "-e", strings.ReplaceAll(perlMemfdLoader, "LOADER", ld)}}})
			if stdout := text(t, raw, "stdout"); stdout != "memfd_create: Operation not permitted\n" {
				t.Fatalf("stdout %q, stderr %q; want memfd_create refused", stdout, text(t, raw, "stderr"))
			}
		})
	}
	// The allowed programs still run, with their libraries.
	raw := runTask(t, policy, bson.D{{Key: "shell", Value: `env >/dev/null && cp /dev/null "$TMPDIR/x" && echo ran`}, {Key: "dir", Value: work}})
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "ran\n" {
		t.Fatalf("the allowed programs did not run: status %d, stdout %q, stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
	}
}

// The loader hole in the library directories, which must stay executable
// for shared objects: a vendor SDK's interpreter under /usr/lib (here a
// copy of id, called python3.12, next to a lib directory of the vendor's
// shared objects), a program placed among the shared objects of the
// multiarch directory, and git's helper directory, each run through the
// loader by an allowed shell, env or find. The task's mount namespace
// mounts every ELF program of the library directories, or their
// directory of programs, noexec: the loader cannot map them. Shared
// objects, the vendor's included, still load; and a program there that
// command.allow lists still runs.
func TestLoaderRunsNoProgramOfTheLibraryDirectories(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	needLandlock(t)
	loader := sandbox.Loaders("/usr/bin/id")
	libc, _ := filepath.Glob("/usr/lib/*/libc.so.6")
	if len(loader) == 0 || len(libc) == 0 {
		t.Skip("/usr/bin/id is not a dynamically linked program of glibc here")
	}
	ld := loader[0]
	libDir := filepath.Dir(libc[0]) // the multiarch directory, holding shared objects
	vendor, err := os.MkdirTemp("/usr/lib", "den-test-vendor-")
	if err != nil {
		t.Skipf("cannot make a vendor directory under /usr/lib: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(vendor) })
	for _, d := range []string{vendor, filepath.Join(vendor, "bin"), filepath.Join(vendor, "lib")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
	}
	python := filepath.Join(vendor, "bin", "python3.12")
	copyFile(t, "/usr/bin/id", python)
	copyFile(t, libc[0], filepath.Join(vendor, "lib", "libc.so.6"))
	placed := filepath.Join(libDir, filepath.Base(vendor)+"-id")
	copyFile(t, "/usr/bin/id", placed)
	t.Cleanup(func() { os.Remove(placed) })

	policy := asTaskUser(command.Policy{Enabled: true, Allow: []string{"/bin/sh", "/usr/bin/dash", "/usr/bin/env", "/usr/bin/cp", "/usr/bin/find"}, Shell: true,
		EnvAllow: []string{"LD_LIBRARY_PATH"}})
	attempts := map[string]string{
		"the shell runs the loader on the vendor's interpreter": ld + ` ` + python,
		"env runs the loader on the vendor's interpreter":       `env ` + ld + ` ` + python,
		"find runs the loader on the vendor's interpreter":      `find ` + python + ` -exec ` + ld + ` {} ';'`,
		"a program among the shared objects":                    ld + ` ` + placed,
	}
	if _, err := os.Stat("/usr/lib/git-core/git"); err == nil {
		attempts["git's helper directory"] = ld + ` /usr/lib/git-core/git --version`
	}
	for name, script := range attempts {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			raw := runTask(t, policy, bson.D{{Key: "shell", Value: script}})
			stdout, stderr := text(t, raw, "stdout"), text(t, raw, "stderr")
			if strings.Contains(stdout, "uid=") || strings.Contains(stdout, "git version") || !strings.Contains(stderr, "failed to map segment") {
				t.Fatalf("stdout %q, stderr %q; want the loader's mapping refused", stdout, stderr)
			}
		})
	}
	t.Run("shared objects still load, the vendor's too", func(t *testing.T) {
		t.Parallel()
		raw := runTask(t, policy, bson.D{{Key: "shell", Value: `case "$(` + ld + ` --list /usr/bin/cp)" in *` + vendor + `/lib/libc.so.6*) echo vendor;; esac; cp /dev/null "$TMPDIR/x" && echo copied`},
			{Key: "env", Value: bson.D{{Key: "LD_LIBRARY_PATH", Value: vendor + "/lib"}}}})
		if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || text(t, raw, "stdout") != "vendor\ncopied\n" {
			t.Fatalf("status %d, stdout %q, stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
		}
	})
	if _, err := os.Stat("/usr/lib/git-core/git"); err == nil {
		t.Run("an allowed program there still runs", func(t *testing.T) {
			t.Parallel()
			p := asTaskUser(command.Policy{Enabled: true, Allow: []string{"/usr/lib/git-core/git"}})
			raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{"/usr/lib/git-core/git", "--version"}}})
			if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 || !strings.HasPrefix(text(t, raw, "stdout"), "git version") {
				t.Fatalf("status %d, stdout %q, stderr %q", st, text(t, raw, "stdout"), text(t, raw, "stderr"))
			}
		})
	}
}
