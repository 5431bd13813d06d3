package cli

import (
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// connect returns a MongoDB client for uri, named app in the server's
// logs. The defaults are set before the URI is applied, so that options
// written in the URI (serverSelectionTimeoutMS, ...) win. monitor, when
// given, watches the client's commands.
func connect(uri, app string, monitor ...*event.CommandMonitor) (*mongo.Client, error) {
	opts := options.Client().SetAppName(app).SetServerSelectionTimeout(10 * time.Second)
	for _, m := range monitor {
		opts.SetMonitor(m)
	}
	client, err := mongo.Connect(opts.ApplyURI(uri))
	if err != nil {
		return nil, fmt.Errorf("MongoDB URI: %w", err)
	}
	return client, nil
}
