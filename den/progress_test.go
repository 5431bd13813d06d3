package den_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
)

// Claims never wait behind housekeeping. Here the node's housekeeping
// hangs on its first command (the read of the node documents that the
// rescue of dead nodes makes, held by the proxy for an hour), from the
// node's start on: tasks are still claimed as slots free, one after the
// other in a queue of one slot, and /readyz says the node works, and that
// its housekeeping does not.
func TestClaimsGoOnWhileHousekeepingHangs(t *testing.T) {
	t.Parallel()
	p := dentest.Faults(t, 1, dentest.Rule{Command: "find", Collection: "nodes", Fault: dentest.Delay, Rate: 1, Delay: time.Hour})
	client, ep, tweak := withEndpoint(t, p.URI())
	db := client.Database(dentest.DB(t).Name())
	qid := dentest.Queue(t, db, "q", sleepPlugin, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, sleepTasks(3, 1)...)
	startNode(t, db, "n", tweak, func(c *den.Config) { c.URI = p.URI() })

	dentest.Eventually(t, 2*time.Minute, "the housekeeping is held", func() bool { return len(p.Injected()) > 0 })
	// Not a speed check: on main, every pass waited for its housekeeping
	// until the pass's one-minute limit, then started over, and never
	// claimed.
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
	code, body := ep.get(t, "/readyz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ready") {
		t.Errorf("/readyz while claims go on and housekeeping hangs: %d %s; want 200 ready", code, body)
	}
	dentest.Eventually(t, 2*time.Minute, "/readyz to say that housekeeping makes no progress", func() bool {
		code, body = ep.get(t, "/readyz")
		return code == http.StatusOK && (strings.Contains(body, "housekeeping has made no progress") || strings.Contains(body, "housekeeping failing"))
	})
	t.Logf("/readyz: %s", strings.TrimSpace(body))
}

// /readyz tells a node whose passes are slow but go on (each node
// document write held 3 s by the proxy: a pass takes 3 s at least, thirty
// times its interval) from one that is stuck (every command held, past
// the pass's one-minute limit and half again): 200 "working" and its
// tasks run, then 503 "stuck", then 200 again when the database answers.
func TestReadyzTellsWorkingFromStuck(t *testing.T) {
	t.Parallel()
	p := dentest.Faults(t, 1)
	client, ep, tweak := withEndpoint(t, p.URI())
	db := client.Database(dentest.DB(t).Name())
	qid := dentest.Queue(t, db, "q", sleepPlugin, 2, "fifo")
	startNode(t, db, "n", tweak, func(c *den.Config) { c.URI = p.URI() })
	ready := func() (int, string) {
		code, body := ep.get(t, "/readyz")
		return code, strings.TrimSpace(body)
	}
	dentest.Eventually(t, time.Minute, "/readyz 200", func() bool { code, _ := ready(); return code == http.StatusOK })

	p.Set(dentest.Rule{Command: "findAndModify", Collection: "nodes", Fault: dentest.Delay, Rate: 1, Delay: 3 * time.Second})
	ids := dentest.Tasks(t, db, qid, sleepTasks(4, 1)...)
	var code int
	var body string
	dentest.Eventually(t, 2*time.Minute, "/readyz to say the node works, slowly", func() bool {
		code, body = ready()
		return code == http.StatusOK && strings.Contains(body, "working")
	})
	t.Logf("/readyz with slow passes: %d %s", code, body)
	for _, id := range ids {
		dentest.WaitStatus(t, db, id, 1)
	}
	if code, body := ready(); code != http.StatusOK {
		t.Errorf("/readyz %d %s while passes are slow and tasks run; want 200", code, body)
	}

	p.Set(dentest.Rule{Fault: dentest.Delay, Rate: 1, Delay: 10 * time.Minute})
	dentest.Eventually(t, 4*time.Minute, "/readyz to say the node is stuck", func() bool {
		code, body = ready()
		return code == http.StatusServiceUnavailable && strings.HasPrefix(body, "stuck: ")
	})
	t.Logf("/readyz when stuck: %d %s", code, body)
	if !strings.Contains(body, "no progress") {
		t.Errorf("/readyz %q does not say for how long nothing progressed", body)
	}

	p.Set()
	dentest.Eventually(t, 3*time.Minute, "/readyz 200 once the database answers", func() bool { code, _ := ready(); return code == http.StatusOK })
	more := dentest.Tasks(t, db, qid, bson.D{{Key: "ms", Value: 1}})
	dentest.WaitStatus(t, db, more[0], 1)
}
