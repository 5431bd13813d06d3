package mongoclient

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

func TestUnreachable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"no server selected", fmt.Errorf("rescue: %w", topology.ServerSelectionError{Wrapped: errors.New("no primary")}), true},
		{"deadline", fmt.Errorf("rescue: %w", context.DeadlineExceeded), true},
		{"connection dropped", mongo.CommandError{Code: 0, Message: "connection closed", Labels: []string{"NetworkError"}}, true},
		{"election", mongo.CommandError{Code: 10107, Name: "NotWritablePrimary", Labels: []string{"RetryableWriteError"}}, true},
		{"document too large", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 10334, Message: "BSONObjectTooLarge"}}}, false},
		{"bad update", mongo.CommandError{Code: 9, Name: "FailedToParse"}, false},
	} {
		if got := Unreachable(c.err); got != c.want {
			t.Errorf("%s: Unreachable(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
