package den_test

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den"
)

// An embedded node (a Go program calling New, not den run) gets the same
// defaults and the same refusals as den run's: a zero interval is the
// default, a negative one or one below MinInterval stops New with an error
// naming the field, before anything runs.
func TestNewHoldsConfigToBounds(t *testing.T) {
	t.Parallel()
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/")) // New dials nothing
	if err != nil {
		t.Fatal(err)
	}
	db := client.Database("embedded")
	for _, tc := range []struct {
		interval time.Duration
		want     string
	}{
		{0, ""},
		{2 * time.Second, ""},
		{-time.Second, "Interval (interval) is -1s; it may not be negative"},
		{time.Nanosecond, "Interval is 1ns; it must be at least 100ms"},
	} {
		n, err := den.New(den.Config{Name: "embedded", Interval: tc.interval, Cgroups: "off"}, db, nil, nil, nil)
		switch {
		case tc.want == "" && (err != nil || n == nil):
			t.Errorf("interval %s: %v", tc.interval, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("interval %s: got %v, want an error with %q", tc.interval, err, tc.want)
		}
	}
}
