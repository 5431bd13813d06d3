package command_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/plugins/command"
)

// buildHelper builds the program testdata/<name> (static, no cgo) into a
// new directory and returns its path.
func buildHelper(t *testing.T, name string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	out := filepath.Join(hostDir(t), name)
	cmd := exec.Command(goTool, "build", "-o", out, "./testdata/"+name)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./testdata/%s: %v\n%s", name, err, b)
	}
	return out
}

// An allowed program that makes system calls of its own (as python3 or
// perl can) writes an ELF into a memfd and tries to execute it, through
// /proc/self/fd/N and through execveat(fd, "", AT_EMPTY_PATH). Landlock
// never sees a path for a memfd, so the sandbox's seccomp filter refuses
// every memfd (EPERM), a sealed one too (MFD_NOEXEC_SEAL: the dynamic
// loader could still map it, TestLoaderRunsNothingNotAllowed), and
// execveat(AT_EMPTY_PATH) of any descriptor. The allowed program itself
// runs.
func TestMemfdExecRefused(t *testing.T) {
	t.Parallel()
	helper := buildHelper(t, "memfdexec")
	policy := command.Policy{Enabled: true, UserOptional: true, Allow: []string{filepath.Dir(helper) + "/"}, Landlock: command.LandlockOptional}
	raw := runTask(t, policy, bson.D{{Key: "command", Value: bson.A{helper}}})
	stdout := text(t, raw, "stdout")
	if strings.Contains(stdout, "pwned") {
		t.Fatalf("the ELF written to a memfd ran:\n%s", stdout)
	}
	if st, _ := raw.Lookup("status").AsInt64OK(); st != 1 {
		t.Fatalf("the allowed program did not run to its end: status %d, stdout %q, stderr %q", st, stdout, text(t, raw, "stderr"))
	}
	wants := []string{
		"memfd_create sealed: operation not permitted",
		"memfd_create: operation not permitted",
		"memfd_create MFD_EXEC: operation not permitted",
		"execveat AT_EMPTY_PATH: operation not permitted",
	}
	for _, want := range wants {
		if !strings.Contains(stdout, want+"\n") {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// perlMemfd is the attack as the report tried it with python3, in perl:
// memfd_create (x86-64's number 319), a copy of echo written into it, and
// execve through /proc/self/fd.
const perlMemfd = `my $name = "x";
my $fd = syscall(319, $name, 0);
if ($fd < 0) { print "memfd_create: $!\n"; exit 0 }
open(my $out, ">&", $fd) or die "dup: $!";
binmode $out;
open(my $in, "<", "/usr/bin/echo") or die "open: $!";
binmode $in;
local $/; my $elf = <$in>;
print $out $elf; close $out;
exec {"/proc/self/fd/$fd"} "echo", "pwned" or print "execve: $!\n";
`

// An allowed perl (all of /usr/bin allowed, Landlock enforced where the
// kernel has it) cannot execute an ELF it writes into a memfd.
func TestMemfdExecRefusedPerl(t *testing.T) {
	t.Parallel()
	if runtime.GOARCH != "amd64" {
		t.Skip("the perl attack names x86-64's system call number; TestMemfdExecRefused covers every architecture")
	}
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skipf("no perl here (%v); TestMemfdExecRefused tries the same with a Go program", err)
	}
	policy := command.Policy{Enabled: true, UserOptional: true, Allow: []string{"/usr/bin/"}, Landlock: command.LandlockOptional}
	raw := runTask(t, policy, bson.D{{Key: "command", Value: bson.A{"/usr/bin/perl", "-e", perlMemfd}}})
	if stdout := text(t, raw, "stdout"); stdout != "memfd_create: Operation not permitted\n" {
		t.Fatalf("stdout %q, stderr %q; want memfd_create refused", stdout, text(t, raw, "stderr"))
	}
}
