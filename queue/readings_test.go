package queue_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// How people and scripts read den's values: what den queue list, den task
// why and the page show, and what an operator types back.

// A paused queue's list line says the limit it resumes with: its
// maxthreads per node before its threads on all nodes, "none" without
// either, and a value that is not a whole number described as it is.
func TestPauseLimitSaysWhatTheQueueResumesWith(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		maxthreads, threads any // nil: absent
		want                string
	}{
		{"maxthreads", int32(4), nil, "4 per node"},
		{"maxthreads before threads", int64(4), int32(10), "4 per node"},
		{"threads", nil, 10.0, "10 on all nodes"},
		{"none", nil, nil, "none"},
		{"a string", "4", nil, `"4" (string) per node`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var p queue.Pause
			if tc.maxthreads != nil {
				p.MaxThreads = raw(t, tc.maxthreads)
			}
			if tc.threads != nil {
				p.Threads = raw(t, tc.threads)
			}
			if got := p.Limit(); got != tc.want {
				t.Fatalf("Limit() = %q, want %q", got, tc.want)
			}
		})
	}
}

// A rate limit reads back as den queue set takes it, and is written in a
// queue document as the nodes decode it: whole seconds as an integer, a
// fraction as a double; both round-trip through ParseRateLimit and
// DecodeRateLimit unchanged.
func TestRateLimitWrittenAsItIsRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		text    string
		perType bson.Type
	}{
		{"2/10s", "2/10s", bson.TypeInt64},
		{"100/1m", "100/1m0s", bson.TypeInt64},
		{"3/0.5", "3/500ms", bson.TypeDouble},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			l, err := queue.ParseRateLimit(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := l.String(); got != tc.text {
				t.Fatalf("String() = %q, want %q", got, tc.text)
			}
			again, err := queue.ParseRateLimit(l.String())
			if err != nil || again != l {
				t.Fatalf("ParseRateLimit(%q) = %v, %v; want %v", l.String(), again, err, l)
			}
			doc := mustRaw(t, l.Document())
			if typ := doc.Lookup("starts").Type; typ != bson.TypeInt32 {
				t.Fatalf("starts written as %s, want an int32", typ)
			}
			if typ := doc.Lookup("per").Type; typ != tc.perType {
				t.Fatalf("per written as %s, want %s", typ, tc.perType)
			}
			back, err := queue.DecodeRateLimit(bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc})
			if err != nil || back == nil || *back != l {
				t.Fatalf("the document %s decodes to %v, %v; want %v", doc, back, err, l)
			}
		})
	}
}

// A task's priority orders the claim by its number (0 without one, or
// with one that is not a number or NaN), and shows as people read it.
func TestPriorityReadAsTheClaimOrdersIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		v    any // nil: absent
		of   float64
		text string
	}{
		{"absent", nil, 0, ""},
		{"null", bson.Null{}, 0, ""},
		{"int32", int32(-3), -3, "-3"},
		{"int64", int64(1 << 40), 1 << 40, "1099511627776"},
		{"double", 2.5, 2.5, "2.5"},
		{"decimal", must(bson.ParseDecimal128("70.5")), 70.5, "70.5"},
		{"NaN", math.NaN(), 0, "NaN"},
		{"string", "7", 0, `"7" (string)`},
		{"boolean", true, 0, "true (boolean)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v bson.RawValue
			if tc.v != nil {
				v = raw(t, tc.v)
			}
			if got := queue.PriorityOf(v); got != tc.of {
				t.Errorf("PriorityOf(%s) = %v, want %v", v, got, tc.of)
			}
			if got := queue.PriorityText(v); got != tc.text {
				t.Errorf("PriorityText(%s) = %q, want %q", v, got, tc.text)
			}
		})
	}
}

// An operator gives a status as a number or by its name, in any case and
// with spaces around; anything else is refused with the names to use.
func TestParseStatusTakesNumbersAndNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{
		{"-2", queue.StatusQueued, false},
		{"7", 7, false},
		{"queued", queue.StatusQueued, false},
		{" Failed ", queue.StatusFailed, false},
		{"orphaned", queue.StatusOrphaned, false},
		{"succeeded", queue.StatusSucceeded, false},
		{"finished", 0, true}, // StatusName's word for 3 and up: no one status
		{"done", 0, true},
		{"", 0, true},
	} {
		got, err := queue.ParseStatus(tc.in)
		if tc.err {
			if err == nil || !strings.Contains(err.Error(), "want a number or one of orphaned") {
				t.Errorf("ParseStatus(%q) = %d, %v; want the refusal naming the statuses", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseStatus(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// A summary puts each status in one group and adds up each group's
// tasks: the five groups together count every task with a whole-number
// status.
func TestStatusGroupsAddUp(t *testing.T) {
	t.Parallel()
	groups := map[int]string{
		queue.StatusOrphaned: queue.GroupFailed, queue.StatusCancelled: queue.GroupCancelled,
		queue.StatusBlocked: queue.GroupTodo, queue.StatusTerminated: queue.GroupTodo, queue.StatusQueued: queue.GroupTodo,
		queue.StatusClaimed: queue.GroupRunning, queue.StatusRunning: queue.GroupRunning,
		queue.StatusSucceeded: queue.GroupDone, queue.StatusFailed: queue.GroupFailed, 9: queue.GroupFailed, -9: queue.GroupTodo,
	}
	c := queue.StatusCounts{ByStatus: map[int]int64{}, Other: 1000}
	want := map[string]int64{}
	for st, g := range groups {
		if got := queue.StatusGroup(st); got != g {
			t.Errorf("StatusGroup(%d) = %q, want %q", st, got, g)
		}
		n := int64(st*st + 1) // a different count for each status
		c.ByStatus[st] = n
		want[g] += n
	}
	var sum int64
	for _, g := range []string{queue.GroupTodo, queue.GroupRunning, queue.GroupDone, queue.GroupFailed, queue.GroupCancelled} {
		if got := c.Group(g); got != want[g] {
			t.Errorf("Group(%q) = %d, want %d", g, got, want[g])
		}
		sum += c.Group(g)
	}
	if sum != c.Total()-c.Other {
		t.Errorf("the groups add up to %d, want every task with a status, %d", sum, c.Total()-c.Other)
	}
}

// A node's stats document holds its sample (running, load) when it says
// so, or when it counts no finished task (then it was written only for
// the sample); one that counts finished tasks without saying so was
// written by a den before samples, and has none.
func TestNodeSampled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    queue.StatPoint
		want bool
	}{
		{queue.StatPoint{Sampled: true, Succeeded: 3}, true},
		{queue.StatPoint{}, true},
		{queue.StatPoint{Succeeded: 3}, false},
		{queue.StatPoint{Failed: 1}, false},
	} {
		if got := tc.p.NodeSampled(); got != tc.want {
			t.Errorf("%+v.NodeSampled() = %v, want %v", tc.p, got, tc.want)
		}
	}
}

// den queue set checks each retention key with the nodes' own decoder,
// and names the key in its refusal; a key it does not know is not its to
// refuse.
func TestDecodeRetentionSettingChecksEachKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sub  string
		v    any
		want string // "" no error, else a part of it
	}{
		{queue.RetainSucceeded, "7d", ""},
		{queue.RetainFailed, "keep", ""},
		{queue.RetainCancelled, int32(3600), ""},
		{queue.RetainOrphaned, "30s", "retention.orphaned is 30s, below the minimum"},
		{queue.RetainSucceeded, true, "retention.succeeded is true (boolean)"},
		{"action", "Archive", ""},
		{"action", "shred", `retention.action is "shred" (string); want "delete" or "archive"`},
		{"reports", "delete", ""},
		{"reports", "keep", ""},
		{"action", "keep", `retention.action is "keep" (string); want "delete" or "archive"`},
		{"reports", "archive", `retention.reports is "archive" (string); want "keep" or "delete"`},
		{"reports", int32(1), `retention.reports is`},
		{"other", "anything", ""},
	} {
		err := queue.DecodeRetentionSetting(tc.sub, raw(t, tc.v))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("DecodeRetentionSetting(%q, %v) = %v, want nil", tc.sub, tc.v, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("DecodeRetentionSetting(%q, %v) = %v, want an error with %q", tc.sub, tc.v, err, tc.want)
		}
	}
}

// A run beats an eighth of its lease, never more often than every second
// nor less often than every minute.
func TestBeatEvery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ lease, want time.Duration }{
		{queue.DefaultDeadNodeAfter, queue.DefaultDeadNodeAfter / 8},
		{80 * time.Second, 10 * time.Second},
		{time.Second, time.Second},
		{0, time.Second},
		{time.Hour, time.Minute},
	} {
		if got := queue.BeatEvery(tc.lease); got != tc.want {
			t.Errorf("BeatEvery(%s) = %s, want %s", tc.lease, got, tc.want)
		}
	}
}

// An outcome's fields, for a result's Extra, are its kind and reason
// under the task's field names; no outcome writes nothing.
func TestOutcomeFields(t *testing.T) {
	t.Parallel()
	o := queue.Outcome{Kind: queue.OutcomeTimeout, Reason: "ran past its 5s"}
	doc := mustRaw(t, o.Fields())
	if got, _ := doc.Lookup(queue.FieldOutcome).StringValueOK(); got != queue.OutcomeTimeout {
		t.Errorf("%s = %q, want %q", queue.FieldOutcome, got, queue.OutcomeTimeout)
	}
	if got, _ := doc.Lookup(queue.FieldOutcomeReason).StringValueOK(); got != o.Reason {
		t.Errorf("%s = %q, want %q", queue.FieldOutcomeReason, got, o.Reason)
	}
	if n := len(queue.Outcome{}.Fields()); n != 0 {
		t.Errorf("no outcome has %d fields, want none", n)
	}
}

// A node adds the requests of the tasks it starts and takes off those
// that end: what is free never goes below zero, even when a request was
// larger than what the node counted as free.
func TestResourcesAddAndSub(t *testing.T) {
	t.Parallel()
	free := queue.Resources{MemoryMB: 4096, CPUs: 4}
	task := queue.Resources{MemoryMB: 1024, CPUs: 1.5}
	if got := free.Sub(task); got != (queue.Resources{MemoryMB: 3072, CPUs: 2.5}) {
		t.Errorf("%v less %v = %v", free, task, got)
	}
	if got := free.Sub(task).Add(task); got != free {
		t.Errorf("taking off and adding back %v gives %v, want %v", task, got, free)
	}
	if got := task.Sub(free); got != (queue.Resources{}) {
		t.Errorf("%v less %v = %v, want nothing (none below zero)", task, free, got)
	}
	if got := (queue.Resources{MemoryMB: 10}).Sub(queue.Resources{CPUs: 1}); got != (queue.Resources{MemoryMB: 10}) {
		t.Errorf("each amount on its own: got %v", got)
	}
}
