package queueset_test

import (
	"testing"

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
