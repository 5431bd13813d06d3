package contain

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// DetectPidsV1 returns the directory of this process's cgroup in a cgroup
// v1 hierarchy that holds the pids controller, when this process may
// create cgroups there (a hybrid system, where systemd or the container
// mounts the v1 controllers beside an empty cgroup v2; as root), or an
// error saying why not. A run's program gets a cgroup of its own there
// (RunCgroup names it), whose pids.max limits its processes; den's own
// processes stay out of it.
func DetectPidsV1() (string, error) { return detectV1("pids", "pids.max") }

// DetectMemoryV1 is DetectPidsV1 for the memory controller: where a
// command task's program gets a cgroup of its own whose
// memory.limit_in_bytes bounds its memory (den/sandbox).
func DetectMemoryV1() (string, error) { return detectV1("memory", "memory.limit_in_bytes") }

// DetectCPUV1 is DetectPidsV1 for the cpu controller: where a command
// task's program gets a cgroup of its own whose CFS quota
// (cpu.cfs_quota_us) bounds its CPU time (den/sandbox).
func DetectCPUV1() (string, error) { return detectV1("cpu", "cpu.cfs_quota_us") }

// detectV1 finds this process's cgroup in the v1 hierarchy of controller,
// and checks that it may create a cgroup there that has file.
func detectV1(controller, file string) (string, error) {
	mount, root, err := v1Mount(controller)
	if err != nil {
		return "", err
	}
	rel, err := ownV1(controller)
	if err != nil {
		return "", err
	}
	if root != "/" {
		rel = strings.TrimPrefix(rel, root)
	}
	dir := filepath.Join(mount, rel)
	probe, err := os.MkdirTemp(dir, fmt.Sprintf("den-probe-%d-", os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("cannot create cgroups in the %s cgroup %s: %w", controller, dir, err)
	}
	_, statErr := os.Stat(filepath.Join(probe, file))
	if err := os.Remove(probe); err != nil {
		return "", fmt.Errorf("remove probe cgroup %s: %w", probe, err)
	}
	if statErr != nil {
		return "", fmt.Errorf("the %s cgroup %s has no %s: %w", controller, dir, file, statErr)
	}
	return dir, nil
}

// v1Mount returns where the v1 hierarchy with controller is mounted, and
// which of its cgroups is mounted there.
func v1Mount(controller string) (mount, root string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", "", fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		i := slices.Index(fields, "-")
		if i < 5 || i+3 >= len(fields) || fields[i+1] != "cgroup" {
			continue
		}
		if slices.Contains(strings.Split(fields[i+3], ","), controller) {
			return fields[4], fields[3], nil
		}
	}
	return "", "", fmt.Errorf("no cgroup v1 hierarchy with the %s controller is mounted", controller)
}

// ownV1 returns this process's cgroup in the v1 hierarchy of controller.
func ownV1(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-id:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("this process is in no cgroup v1 %s hierarchy", controller)
}

// LimitPids creates the cgroup dir, if need be, and sets its pids.max to
// max: the most processes and threads its members may have together.
func LimitPids(dir string, max int) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	if err := writeProc(filepath.Join(dir, "pids.max"), strconv.Itoa(max)); err != nil {
		return fmt.Errorf("set pids.max of cgroup %s: %w", dir, err)
	}
	return nil
}
