package worker

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den/internal/mongoclient"
	"github.com/den-project/den/den/internal/relay"
	"github.com/den-project/den/den/runner"
)

// connect returns the runner's client, with den's client options
// (package mongoclient): through the node's relay when ctl (the relay
// control channel) is given, else straight to spec.URI. close disconnects
// it.
func connect(spec runner.Spec, ctl *os.File, log *zap.Logger) (client *mongo.Client, close func(context.Context), err error) {
	direct := func(context.Context) (*mongo.Client, error) {
		return mongo.Connect(mongoclient.Options(spec.URI, "den task-runner"))
	}
	disconnect := func(c *mongo.Client) func(context.Context) {
		return func(ctx context.Context) {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			c.Disconnect(dctx)
		}
	}
	if ctl == nil {
		c, err := direct(context.Background())
		if err != nil {
			return nil, nil, fmt.Errorf("connect to MongoDB: %w", err)
		}
		return c, disconnect(c), nil
	}
	d, err := relay.NewDialer(ctl, direct, log)
	if err != nil {
		log.Warn("cannot use the node's relay; connecting to MongoDB directly", zap.Error(err))
		return connect(spec, nil, log)
	}
	c, err := mongo.Connect(mongoclient.Options(relay.URI, "den task-runner").SetDialer(d))
	if err != nil {
		d.Close(context.Background())
		return nil, nil, fmt.Errorf("connect to the node's relay: %w", err)
	}
	return c, func(ctx context.Context) {
		disconnect(c)(ctx) // its endSessions is answered by the relay
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		d.Close(dctx)
	}, nil
}
