package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/den/internal/mongoclient"
)

// connect returns a MongoDB client for uri with den's client options
// (package mongoclient: w: majority, retryable writes and reads, the
// primary, unless the URI says otherwise), named app in the server's
// logs. monitor, when given, watches the client's commands. The client
// connects in the background; what fails here is the URI (a usage error,
// though config.Load has parsed it already), a mongodb+srv URI's DNS
// lookup or a file the URI names (operational errors).
func connect(uri, app string, monitor ...*event.CommandMonitor) (*mongo.Client, error) {
	opts := mongoclient.Options(uri, app)
	for _, m := range monitor {
		opts.SetMonitor(m)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		err = fmt.Errorf("MongoDB URI: %w", err)
		var dns *net.DNSError
		var file *fs.PathError
		if errors.As(err, &dns) || errors.As(err, &file) {
			return nil, err
		}
		return nil, usageError{err}
	}
	return client, nil
}
