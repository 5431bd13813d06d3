package cli

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/internal/mongoclient"
)

// connect returns a MongoDB client for uri with den's client options
// (package mongoclient: w: majority, retryable writes and reads, the
// primary, unless the URI says otherwise), named app in the server's
// logs. monitor, when given, watches the client's commands.
func connect(uri, app string, monitor ...*event.CommandMonitor) (*mongo.Client, error) {
	opts := mongoclient.Options(uri, app)
	for _, m := range monitor {
		opts.SetMonitor(m)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("MongoDB URI: %w", err)
	}
	return client, nil
}
