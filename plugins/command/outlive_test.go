package command_test

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/sys/unix"
)

// token returns a random name for what a test's task leaves behind.
func token(prefix string) string {
	b := make([]byte, 8)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// A task adds a key to its user's keyring, which the kernel keeps after
// the task ends (keyrings are not namespaced) for every later task of that
// user to find. The task filter refuses add_key, request_key and keyctl
// (ENOSYS), so neither the task nor a later one of the same user gets a
// key in or out.
func TestTaskKeysRefused(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	policy, helper := reachPolicy(t)
	p := asTaskUser(policy)
	key := token("den-test-key-")
	raw := runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "addkey:" + key}}})
	if stdout := text(t, raw, "stdout"); stdout != "addkey:"+key+": function not implemented\n" {
		t.Errorf("the first task: stdout %q, want add_key refused; stderr %q", stdout, text(t, raw, "stderr"))
	}
	raw = runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "findkey:" + key}}})
	if stdout := text(t, raw, "stdout"); strings.HasSuffix(stdout, ": ok\n") || stdout != "findkey:"+key+": function not implemented\n" {
		t.Errorf("a later task of the same user: stdout %q, want keyctl refused; stderr %q", stdout, text(t, raw, "stderr"))
	}
}

// nodeIPC returns the ids of the SysV objects of kind (shm, msg, sem)
// with key in the node's IPC namespace (/proc/sysvipc).
func nodeIPC(kind string, key int) []int {
	b, _ := os.ReadFile("/proc/sysvipc/" + kind)
	var ids []int
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 && f[0] == strconv.Itoa(key) {
			if id, err := strconv.Atoi(f[1]); err == nil {
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// removeNodeIPC removes what a task left in the node's IPC namespace
// (where it is not kept apart), so that a failed run leaves nothing.
func removeNodeIPC(key int) {
	for _, id := range nodeIPC("shm", key) {
		unix.SysvShmCtl(id, unix.IPC_RMID, nil)
	}
	for _, id := range nodeIPC("msg", key) {
		syscall.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
	}
	for _, id := range nodeIPC("sem", key) {
		syscall.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
	}
}

// A task makes a SysV shared memory segment (64 MiB, every page
// touched), a message queue holding a message and a semaphore set, and
// ends without removing them: in the node's IPC namespace they would stay
// with no process attached, outside every cgroup (repeated, a task fills
// the host's memory), for any later task of the user to read. Each task
// has an IPC namespace of its own, which the kernel frees with all it
// holds when the task's last process ends: the node has no such object,
// and a later task of the same user finds none.
func TestTaskIPCDoesNotOutliveIt(t *testing.T) {
	t.Parallel()
	needSetUser(t)
	needNamespaces(t)
	policy, helper := reachPolicy(t)
	p := asTaskUser(policy)
	key := ipcKey()
	t.Cleanup(func() { removeNodeIPC(key) })
	k := strconv.Itoa(key)
	leave := bson.A{helper, "shm-leave:" + k + ":67108864", "msg-leave:" + k, "sem-leave:" + k}
	raw := runTask(t, p, bson.D{{Key: "command", Value: leave}})
	if stdout := text(t, raw, "stdout"); strings.Count(stdout, ": ok\n") != 3 {
		t.Fatalf("the task could not make its objects: stdout %q, stderr %q", stdout, text(t, raw, "stderr"))
	}
	for _, kind := range []string{"shm", "msg", "sem"} {
		if ids := nodeIPC(kind, key); len(ids) > 0 {
			t.Errorf("the task's SysV %s %d outlives it on the node: ids %v", kind, key, ids)
		}
	}
	raw = runTask(t, p, bson.D{{Key: "command", Value: bson.A{helper, "shm:" + k, "msg:" + k, "sem:" + k}}})
	stdout := text(t, raw, "stdout")
	if strings.Count(stdout, "no such file or directory\n") != 3 {
		t.Errorf("a later task of the same user: stdout %q, want none of the objects found; stderr %q", stdout, text(t, raw, "stderr"))
	}
}
