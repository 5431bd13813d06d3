package mongoclient

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

const (
	// ServerSelectionTimeout is how long an operation waits for a server
	// to send it to: during an election, for a primary to be elected.
	ServerSelectionTimeout = 10 * time.Second
	// ConnectTimeout bounds the opening of one connection.
	ConnectTimeout = 10 * time.Second
)

// Options are den's client options for uri, named app in the server's
// logs. They are set before the URI is applied, so that options written
// in the URI (w, journal, retryWrites, retryReads, readPreference,
// serverSelectionTimeoutMS, connectTimeoutMS, ...) win:
//   - writes acknowledged by a majority of the replica set (w: majority):
//     a claim, a finish or a put-back acknowledged by the primary alone
//     is rolled back if the primary fails before a secondary has it, and
//     the task then runs twice, or its result is lost;
//   - retryable writes and reads: the driver retries an operation that
//     met an election or a dropped connection, within the operation's
//     deadline, and a replica set applies a retried write once;
//   - reads from the primary: a node decides what to start, put back and
//     rescue from its reads of its own claims, which a secondary may not
//     have yet. (Claims are writes: they go to the primary whatever the
//     URI says.)
func Options(uri, app string) *options.ClientOptions {
	return options.Client().SetAppName(app).
		SetWriteConcern(writeconcern.Majority()).
		SetRetryWrites(true).
		SetRetryReads(true).
		SetReadPreference(readpref.Primary()).
		SetServerSelectionTimeout(ServerSelectionTimeout).
		SetConnectTimeout(ConnectTimeout).
		ApplyURI(uri)
}
