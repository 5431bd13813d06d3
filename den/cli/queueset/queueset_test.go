package queueset_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/cli/queueset"
	"github.com/den-project/den/queue"
)

func TestMemoryRetryFactorSetting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value string
		ok    bool
	}{{"1.5", true}, {"3", true}, {"100", true}, {"1", false}, {"0.5", false}, {"101", false}, {"lots", false}} {
		var s queue.QueueSettings
		err := queueset.Parse(&s, queue.FieldMemoryRetryFactor, c.value)
		if (err == nil) != c.ok {
			t.Errorf("memory_retry_factor=%s: error %v, want ok %v", c.value, err, c.ok)
		}
		doc, _ := bson.Marshal(bson.D{{Key: queue.FieldMemoryRetryFactor, Value: c.value}})
		ctl, problems := queue.DecodeControl(doc)
		if (len(problems) == 0) != c.ok || (c.ok && ctl.MemoryRetryFactor == nil) {
			t.Errorf("a queue with memory_retry_factor %q: problems %q", c.value, problems)
		}
	}
	var s queue.QueueSettings
	if err := queueset.Parse(&s, queue.FieldUsageInterval, "30"); err != nil || len(s.Set) != 1 {
		t.Errorf("usage_interval=30: %v, %v", err, s.Set)
	}
}

// rate_limit=STARTS/PERIOD is written as the document the nodes read back
// to the same limit; a limit the nodes would refuse is refused here.
func TestRateLimitSetting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		value string
		want  queue.RateLimit
	}{{"2/10", queue.RateLimit{Starts: 2, Per: 10 * time.Second}}, {"2/10s", queue.RateLimit{Starts: 2, Per: 10 * time.Second}},
		{"100/1m", queue.RateLimit{Starts: 100, Per: time.Minute}}, {" 5 / 0.5 ", queue.RateLimit{Starts: 5, Per: 500 * time.Millisecond}}} {
		var s queue.QueueSettings
		if err := queueset.Parse(&s, queue.FieldRateLimit, c.value); err != nil || len(s.Set) != 1 {
			t.Fatalf("rate_limit=%s: %v, %v", c.value, err, s.Set)
		}
		doc, _ := bson.Marshal(bson.D{s.Set[0]})
		got, err := queue.DecodeRateLimit(bson.Raw(doc).Lookup(queue.FieldRateLimit))
		if err != nil || got == nil || *got != c.want {
			t.Errorf("rate_limit=%s written as %v, read back as %v, %v; want %v", c.value, s.Set[0].Value, got, err, c.want)
		}
	}
	for _, bad := range []string{"2", "0/10", "2/0", "2/-1", "1001/10", "two/10s", "2/8d"} {
		var s queue.QueueSettings
		if err := queueset.Parse(&s, queue.FieldRateLimit, bad); err == nil {
			t.Errorf("rate_limit=%s accepted: %v", bad, s.Set)
		}
	}
	var s queue.QueueSettings
	if err := queueset.Parse(&s, queue.FieldRateLimit, "none"); err != nil || len(s.Unset) != 1 {
		t.Errorf("rate_limit=none: %v, unset %v", err, s.Unset)
	}
}
