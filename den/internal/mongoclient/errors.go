package mongoclient

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// Unreachable reports whether err says that the database could not be
// reached or had no primary to take a write (no server selected, a
// dropped connection, a timeout, an error labelled RetryableWriteError
// as an election sends), rather than that the server refused what was
// asked of it. The first is true of every command until the database is
// back, and is reported once; the second is true of one document or one
// command, and the caller goes on with the others.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	var sel topology.ServerSelectionError
	if errors.As(err, &sel) || mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	var le mongo.LabeledError
	return errors.As(err, &le) && le.HasErrorLabel("RetryableWriteError")
}
