// Command memfdexec is the attacker of TestMemfdExecRefused: an allowed
// program that tries to execute an ELF it writes into a memfd, which
// Landlock never sees a path for. Each attempt prints one line; the ELF it
// writes is a copy of itself, which, run as "memfdexec pwned", prints
// "pwned".
package main

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pwned" {
		fmt.Println("pwned")
		return
	}
	// A memfd for data, sealed against execution.
	sealed, err := payload(unix.MFD_NOEXEC_SEAL)
	report("memfd_create sealed", err)
	if err == nil {
		report("execve sealed", run(fmt.Sprintf("/proc/self/fd/%d", sealed)))
	}
	fd, err := payload(0)
	report("memfd_create", err)
	if err == nil {
		report("execve /proc/self/fd", run(fmt.Sprintf("/proc/self/fd/%d", fd)))
	}
	fd, err = payload(unix.MFD_EXEC)
	report("memfd_create MFD_EXEC", err)
	if err != nil && sealed >= 0 {
		fd = sealed
	}
	if fd < 0 {
		// No memfd at all: execveat(AT_EMPTY_PATH) of this very program,
		// which the boundary allows to be executed by its path.
		if fd, err = unix.Open("/proc/self/exe", unix.O_RDONLY, 0); err != nil {
			report("open /proc/self/exe", err)
			return
		}
	}
	// Last: on success this process becomes the payload.
	argv, _ := syscall.SlicePtrFromStrings([]string{"memfdexec", "pwned"})
	empty, _ := syscall.BytePtrFromString("")
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)), uintptr(unsafe.Pointer(&argv[0])), 0, unix.AT_EMPTY_PATH, 0)
	report("execveat AT_EMPTY_PATH", errno)
}

// open keeps the payloads' files from being closed by their finalizers.
var keep []*os.File

// payload writes a copy of this program into a new memfd.
func payload(flags int) (int, error) {
	fd, err := unix.MemfdCreate("payload", flags|unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	self, err := os.Open("/proc/self/exe")
	if err != nil {
		return -1, err
	}
	defer self.Close()
	f := os.NewFile(uintptr(fd), "memfd")
	keep = append(keep, f)
	if _, err := io.Copy(f, self); err != nil {
		return -1, err
	}
	return fd, nil
}

// run executes path as "memfdexec pwned" and waits for it.
func run(path string) error {
	pid, err := syscall.ForkExec(path, []string{"memfdexec", "pwned"}, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	if err != nil {
		return err
	}
	var ws syscall.WaitStatus
	_, err = syscall.Wait4(pid, &ws, 0, nil)
	return err
}

func report(what string, err error) {
	if err == nil || err == syscall.Errno(0) {
		fmt.Printf("%s: ok\n", what)
		return
	}
	fmt.Printf("%s: %v\n", what, err)
}
