package command_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
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
