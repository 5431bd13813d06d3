package runner

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/relay"
)

// EnvRelayFD names the file descriptor of the runner's relay control
// channel: set by a node whose runners reach MongoDB through it (the
// default; runner.relay: false turns it off), and by the supervisor for
// its worker.
const EnvRelayFD = "DEN_RELAY_FD"

// takeRelayControl returns the relay control channel this process
// inherited, or nil. It marks the descriptor close-on-exec at once and
// removes its variable from the environment, so that no program the task
// starts inherits either.
func takeRelayControl() (*os.File, error) { return takeInherited(EnvRelayFD, "relay-control", false) }

// takeInherited returns the descriptor named by the environment variable
// env, or nil when it is unset or empty, marked close-on-exec and with the
// variable removed; non-blocking when nonblock is set (a read then ends
// when the file is closed).
func takeInherited(env, name string, nonblock bool) (*os.File, error) {
	v := os.Getenv(env)
	os.Unsetenv(env)
	if v == "" {
		return nil, nil
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not a file descriptor", env, v)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
		return nil, fmt.Errorf("%s=%d: %w", env, fd, err)
	}
	unix.CloseOnExec(fd)
	if nonblock {
		if err := unix.SetNonblock(fd, true); err != nil {
			return nil, fmt.Errorf("%s=%d: %w", env, fd, err)
		}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// connect returns the runner's client: through the node's relay when ctl
// (the relay control channel) is given, else straight to spec.URI. close
// disconnects it.
func connect(spec Spec, ctl *os.File, log *zap.Logger) (client *mongo.Client, close func(context.Context), err error) {
	direct := func(context.Context) (*mongo.Client, error) {
		return mongo.Connect(options.Client().ApplyURI(spec.URI).SetAppName("den task-runner"))
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
	c, err := mongo.Connect(options.Client().ApplyURI(relay.URI).SetDialer(d).SetAppName("den task-runner"))
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
