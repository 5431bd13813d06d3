package sandbox

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSetup measures what the sandbox adds to starting a command
// task's program: /bin/true run directly, then through the sandbox with
// each part of the boundary a node gives a task (Landlock with scoping,
// seccomp, the task's user, its temporary directory made and removed, a
// mount namespace with every mount noexec but what it executes, a PID
// namespace with its /proc and the sandbox as its init, an IPC namespace,
// a tmpfs for its temporary directory, a memory cgroup made and removed
// where den may make one, the library directories' programs noexec, and a
// network namespace for network none). The difference between a case and
// "direct" is the setup cost per task (docs/security.md records it). The
// time per task depends on how loaded the machine is; cpu-ms/op, the CPU
// time of the benchmark and all the processes it waited for, much less.
func BenchmarkSetup(b *testing.B) {
	user := &Credential{Uid: 65534, Gid: 65534}
	full := func(net string) func(b *testing.B) {
		return func(b *testing.B) {
			if !HasCaps(CapsUser + " " + CapsNamespaces) {
				b.Skipf("this process lacks %s %s", CapsUser, CapsNamespaces)
			}
			defer reportCPU(b)()
			for b.Loop() {
				tmp, err := NewTmp(user)
				if err != nil {
					b.Fatal(err)
				}
				var memory string
				if dir, err := NewMemoryCgroup(2 << 30); err == nil {
					memory = dir
				}
				spec := Spec{Path: "/bin/true", Args: []string{"true"}, Exec: []string{"/bin/true", "/usr/bin/true"}, Landlock: LandlockABI() > 0,
					Memory: 2 << 30, MemoryCgroup: memory, User: user, Dir: TaskTmp, Tmp: tmp, MountNS: true, PrivateTmp: true, MaxProcesses: 64,
					PIDNS: true, IPCNS: true, GraceMS: 1000, TmpSize: 1 << 30}
				if net == NetworkNone {
					spec.Network, spec.NoNetwork = NetworkNone, true
				}
				run(b, spec)
				if memory != "" {
					if err := RemoveMemoryCgroup(memory); err != nil {
						b.Fatal(err)
					}
				}
				if err := RemoveTmp(tmp, user); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("landlock+seccomp", func(b *testing.B) {
		defer reportCPU(b)()
		for b.Loop() {
			run(b, Spec{Path: "/bin/true", Args: []string{"true"}, Exec: []string{"/bin/true", "/usr/bin/true"}, Landlock: LandlockABI() > 0})
		}
	})
	b.Run("full", full(NetworkAll))
	b.Run("full, network none", full(NetworkNone))
}

// reportCPU starts counting the CPU time of this process and of the
// processes it waits for; the function it returns reports it per
// operation (cpu-ms/op).
func reportCPU(b *testing.B) func() {
	cpu := func() time.Duration {
		var self, children syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &self)
		syscall.Getrusage(syscall.RUSAGE_CHILDREN, &children)
		return time.Duration(self.Utime.Nano() + self.Stime.Nano() + children.Utime.Nano() + children.Stime.Nano())
	}
	start := cpu()
	return func() { b.ReportMetric(float64(cpu()-start)/float64(b.N)/1e6, "cpu-ms/op") }
}

func run(b *testing.B, spec Spec) {
	cmd, err := Command(spec, []string{"PATH=/usr/bin:/bin"})
	if err != nil {
		b.Fatal(err)
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
}
