package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/queue"
)

// A document that does not decode as what its collection holds is told
// apart from the database failing, however deep the error is wrapped.
func TestIsDocumentError(t *testing.T) {
	t.Parallel()
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: bson.D{{Key: "a", Value: "b"}}}, {Key: "queue", Value: bson.A{1}}})
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ID    bson.ObjectID `bson:"_id"`
		Queue bson.ObjectID `bson:"queue"`
	}
	decodeErr := bson.Unmarshal(raw, &doc)
	if decodeErr == nil {
		t.Fatal("a document _id decoded into an ObjectID")
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"decode error", decodeErr, true},
		{"wrapped decode error", fmt.Errorf("count running tasks: %w", fmt.Errorf("read: %w", decodeErr)), true},
		{"no documents", mongo.ErrNoDocuments, false},
		{"deadline", fmt.Errorf("claim task in q: %w", context.DeadlineExceeded), false},
		{"network", errors.New("connection reset by peer"), false},
		{"nil", nil, false},
	} {
		if got := queue.IsDocumentError(tc.err); got != tc.want {
			t.Errorf("%s (%v): %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
