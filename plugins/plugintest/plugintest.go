package plugintest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"

	"github.com/den-project/den/den/devdb"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// EnvURI names a MongoDB to test against instead of the embedded server
// (the variable den's own tests read).
const EnvURI = "DEN_TEST_MONGODB_URI"

// DefaultPlugin is the plugin name Run gives the task's queue unless
// Name says otherwise.
const DefaultPlugin = "PluginTest::Plugin"

// node is the node name the tasks are claimed by.
const node = "plugintest"

// Server is a database to run plugins against. Its methods may be called
// from several goroutines.
type Server struct {
	uri    string
	client *mongo.Client
	db     *mongo.Database
	stop   context.CancelFunc // stops the embedded server; nil for EnvURI
	done   <-chan struct{}
	dir    string
}

// Start starts the embedded development server in this process (or
// connects to DEN_TEST_MONGODB_URI) and opens a database of its own there.
// ctx bounds the start only. Close stops it.
func Start(ctx context.Context) (*Server, error) {
	s := &Server{}
	uri := os.Getenv(EnvURI)
	if uri == "" {
		dir, err := os.MkdirTemp("", "plugintest-")
		if err != nil {
			return nil, fmt.Errorf("plugintest: data directory: %w", err)
		}
		srvCtx, stop := context.WithCancel(context.Background())
		srv, err := devdb.Start(srvCtx, devdb.Config{Dir: dir})
		if err != nil {
			stop()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("plugintest: start the embedded server: %w", err)
		}
		s.stop, s.done, s.dir, uri = stop, srv.Done(), dir, srv.URI()
	}
	s.uri = uri
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetAppName("den plugintest"))
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("plugintest: connect to %s: %w", uri, err)
	}
	s.client = client
	var b [6]byte
	rand.Read(b[:])
	s.db = client.Database("plugintest_" + hex.EncodeToString(b[:]))
	if err := client.Ping(ctx, nil); err != nil {
		s.Close()
		return nil, fmt.Errorf("plugintest: reach the server: %w", err)
	}
	return s, nil
}

// New starts a Server for test t (see Start) and closes it when t ends. It
// fails t if the server cannot start.
func New(t testing.TB) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("plugintest: %v", err)
		}
	})
	return s
}

// DB is the Server's database: the Disbatch database plugins get as
// Env.DB, for checking what a plugin wrote there.
func (s *Server) DB() *mongo.Database { return s.db }

// URI is the server's mongodb:// URI, for running a den binary against the
// Server's database (den run --mongo-uri URI --database DB().Name()).
func (s *Server) URI() string { return s.uri }

// Close drops the database, disconnects and stops the embedded server.
func (s *Server) Close() error {
	var errs []error
	if s.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := s.db.Drop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drop database %s: %w", s.db.Name(), err))
		}
		s.client.Disconnect(ctx)
		cancel()
	}
	if s.stop != nil {
		s.stop()
		<-s.done
		os.RemoveAll(s.dir)
	}
	return errors.Join(errs...)
}

// Result is what a run left in its task document.
type Result struct {
	// Status is the task's final status: plugins.StatusSucceeded, or a
	// failure (after den's rules: an error, a panic or a status that is
	// not positive is StatusFailed).
	Status int
	// Stdout and Stderr are the task's output, read from GridFS when it
	// went there. Stderr ends with den's own lines, such as
	// "den: plugin returned an error: ...".
	Stdout, Stderr string
	// Records are the fields the plugin recorded with Env.Record, decoded
	// from the task document (whole numbers are int32 or int64, as
	// MongoDB stores them).
	Records map[string]any
	// Task is the whole task document.
	Task bson.Raw
}

// Option changes how Run sets up a task.
type Option func(*setup)

type setup struct {
	name   string
	config any
	fields bson.D
	log    *zap.Logger
	gfs    string
}

// Name is the plugin name of the task's queue, for a plugin that behaves
// by the name it runs under (default DefaultPlugin).
func Name(plugin string) Option { return func(s *setup) { s.name = plugin } }

// Config is the plugin's section of the node configuration, as
// plugins: {<name>: section} in den's configuration file; it is encoded
// as JSON, and the plugin reads it with Env.Config.
func Config(section any) Option { return func(s *setup) { s.config = section } }

// Field sets a field of the task document, such as timeout or max_output.
func Field(key string, value any) Option {
	return func(s *setup) { s.fields = append(s.fields, bson.E{Key: key, Value: value}) }
}

// GFS is where the task's output goes, as the node's gfs setting: "true"
// (GridFS), "false" (the task document) or "auto" (the default: GridFS
// when it does not fit in the document).
func GFS(mode string) Option { return func(s *setup) { s.gfs = mode } }

// Log is the task runner's logger, which the plugin gets as Env.Log
// (default: none).
func Log(l *zap.Logger) Option { return func(s *setup) { s.log = l } }

// Run runs plugin p on one task whose parameters are params (anything the
// bson package encodes as a document: bson.D, a map, a struct), and
// returns what den recorded. The error is for a run that could not be set
// up or read back; a failing plugin is a Result with a failure Status.
func (s *Server) Run(ctx context.Context, p plugins.Plugin, params any, opts ...Option) (Result, error) {
	st := setup{name: DefaultPlugin, log: zap.NewNop(), gfs: "auto"}
	for _, o := range opts {
		o(&st)
	}
	var config json.RawMessage
	if st.config != nil {
		b, err := json.Marshal(st.config)
		if err != nil {
			return Result{}, fmt.Errorf("plugintest: encode the plugin's configuration: %w", err)
		}
		config = b
	}
	store := queue.NewStore(s.db)
	qid, err := store.CreateQueue(ctx, "plugintest-"+bson.NewObjectID().Hex(), st.name, 1, queue.SortFIFO)
	if err != nil {
		return Result{}, fmt.Errorf("plugintest: create the queue: %w", err)
	}
	if params == nil {
		params = bson.D{}
	}
	id, now := bson.NewObjectID(), time.Now()
	task := bson.D{
		{Key: "_id", Value: id}, {Key: "queue", Value: qid}, {Key: "status", Value: queue.StatusClaimed},
		{Key: "node", Value: node}, {Key: "parameters", Value: params}, {Key: "ctime", Value: now},
		{Key: "mtime", Value: now}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil},
	}
	task = append(task, st.fields...)
	if _, err := s.db.Collection("tasks").InsertOne(ctx, task); err != nil {
		return Result{}, fmt.Errorf("plugintest: insert the task: %w", err)
	}
	var reg plugins.Registry
	reg.Register(st.name, p)
	r := &worker.Executor{
		Spec: runner.Spec{Node: node, Task: id.Hex(), Plugin: st.name, GFS: st.gfs, PluginConfig: config},
		DB:   s.db, Plugins: &reg, Log: st.log,
	}
	if err := r.Run(ctx); err != nil {
		return Result{}, fmt.Errorf("plugintest: run the task: %w", err)
	}
	return s.result(ctx, id)
}

func (s *Server) result(ctx context.Context, id bson.ObjectID) (Result, error) {
	raw, err := s.db.Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		return Result{}, fmt.Errorf("plugintest: read the task: %w", err)
	}
	res := Result{Task: raw, Records: map[string]any{}}
	task, err := queue.DecodeTask(raw)
	if err != nil {
		return res, fmt.Errorf("plugintest: decode the task: %w", err)
	}
	if !task.StatusOK {
		return res, fmt.Errorf("plugintest: the task has no status: %s", raw)
	}
	res.Status = task.Status
	for stream, out := range map[string]*string{queue.StreamStdout: &res.Stdout, queue.StreamStderr: &res.Stderr} {
		text, file, err := task.Output(stream)
		if err != nil || file.IsZero() {
			*out = text // a missing or unreadable field is no output
			continue
		}
		b, err := gridfs.NewBucket(s.db, queue.GridFSPrefix).ReadFile(ctx, file)
		if err != nil {
			return res, fmt.Errorf("plugintest: read %s from GridFS: %w", stream, err)
		}
		*out = string(b)
	}
	var doc bson.M
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return res, fmt.Errorf("plugintest: decode the task: %w", err)
	}
	reserved := plugins.ReservedFields()
	for k, v := range doc {
		if !slices.Contains(reserved, k) {
			res.Records[k] = v
		}
	}
	return res, nil
}
