package queue_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// raw encodes v as the BSON value a writer would store.
func raw(t *testing.T, v any) bson.RawValue {
	t.Helper()
	b, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
	if err != nil {
		t.Fatal(err)
	}
	return bson.Raw(b).Lookup("v")
}

func TestDecoders(t *testing.T) {
	t.Parallel()
	when := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		v    any
		want any // nil: refused
	}{
		{"seconds int", int32(30), 30 * time.Second},
		{"seconds double", 1.5, 1500 * time.Millisecond},
		{"seconds string", "30", 30 * time.Second},
		{"seconds duration string", "2m", 2 * time.Minute},
		{"seconds negative", -1, nil},
		{"seconds word", "soon", nil},
		{"seconds bool", true, nil},
		{"seconds NaN string", "NaN", nil},
		{"count int64", int64(4), int64(4)},
		{"count double", 4.0, int64(4)},
		{"count string", "4", int64(4)},
		{"count fraction", 4.5, nil},
		{"count negative", int32(-1), nil},
		{"count word", "four", nil},
		{"bool true", true, true},
		{"bool 1", int32(1), true},
		{"bool 0.0", 0.0, false},
		{"bool yes", "Yes", true},
		{"bool off", "off", false},
		{"bool 2", int32(2), nil},
		{"bool maybe", "maybe", nil},
		{"bool array", bson.A{true}, nil},
		{"time date", when, when},
		{"time epoch int (Perl)", int64(when.Unix()), when},
		{"time epoch double", float64(when.Unix()), when},
		{"time RFC 3339", "2026-11-23T10:00:00Z", when},
		{"time RFC 3339 with zone", "2026-11-23T11:00:00+01:00", when},
		{"time without zone is UTC", "2026-11-23 10:00:00", when},
		{"time epoch string", "1795428000", when},
		{"time word", "tomorrow", nil},
		{"time bool", true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := raw(t, tc.v)
			var got any
			var err error
			switch tc.name[:4] {
			case "seco":
				got, err = queue.DecodeSeconds(v)
			case "coun":
				got, err = queue.DecodeCount(v)
			case "bool":
				got, err = queue.DecodeBool(v)
			case "time":
				var at time.Time
				at, err = queue.DecodeTime(v)
				got = at
				if err == nil && tc.want != nil && at.Equal(tc.want.(time.Time)) {
					got = tc.want
				}
			}
			switch {
			case tc.want == nil && err == nil:
				t.Fatalf("accepted %v as %v; want it refused", tc.v, got)
			case tc.want == nil:
				t.Logf("refused: %v", err)
			case err != nil:
				t.Fatalf("refused %v: %v", tc.v, err)
			case got != tc.want:
				t.Fatalf("read %v as %v, want %v", tc.v, got, tc.want)
			}
		})
	}
}

// A task's fields are decoded once; every field that cannot be read is a
// problem that names it.
func TestDecodeTaskProblems(t *testing.T) {
	t.Parallel()
	doc, _ := bson.Marshal(bson.D{
		{Key: "_id", Value: bson.NewObjectID()}, {Key: "queue", Value: "not an id"}, {Key: "status", Value: -2},
		{Key: "parameters", Value: bson.D{}}, {Key: "cancel", Value: "maybe"}, {Key: "timeout", Value: "soon"},
		{Key: "max_retries", Value: 1.5}, {Key: "start_after", Value: "tomorrow"}, {Key: "retry_delay", Value: "5"},
	})
	task, err := queue.DecodeTask(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(task.Problems) != 5 {
		t.Fatalf("problems %q, want 5 (queue, cancel, start_after, timeout, max_retries)", task.Problems)
	}
	for i, field := range []string{"queue", "cancel", "start_after", "timeout", "max_retries"} {
		if len(task.Problems[i]) < len(field) || task.Problems[i][:len(field)] != field {
			t.Errorf("problem %d is %q, want it to start with %s", i, task.Problems[i], field)
		}
	}
	if d := task.Options(nil).RetryDelay; d != 5*time.Second {
		t.Errorf("retry_delay \"5\" read as %s", d)
	}
	if _, err := queue.DecodeTask(bson.Raw(mustMarshal(t, bson.D{{Key: "_id", Value: "x"}}))); err == nil {
		t.Error("a task without an ObjectId _id was decoded")
	}
}

func mustMarshal(t *testing.T, d bson.D) []byte {
	t.Helper()
	b, err := bson.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
