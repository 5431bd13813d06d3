package runner

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/zap"

	"github.com/den-project/den/den/backoff"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Runner runs one task.
type Runner struct {
	Spec    Spec
	DB      *mongo.Database
	Plugins *plugins.Registry
	Log     *zap.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// StartTimeout bounds how long the runner keeps trying to start its task
	// while MongoDB is unreachable; after that the node's orphan reaping
	// takes over. Default 5 minutes.
	StartTimeout time.Duration
	// Retry is the backoff of final writes, which are retried until they
	// land.
	Retry backoff.Policy
}

// Main connects to the database named in spec, runs the task and returns
// when its result is stored. ctx cancellation (SIGTERM to the runner) asks
// the plugin to stop; the result is still stored.
func Main(ctx context.Context, spec Spec, reg *plugins.Registry, log *zap.Logger) error {
	client, err := mongo.Connect(options.Client().ApplyURI(spec.URI).SetAppName("den task-runner"))
	if err != nil {
		return fmt.Errorf("connect to MongoDB: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		client.Disconnect(dctx)
	}()
	r := &Runner{Spec: spec, DB: client.Database(spec.Database), Plugins: reg, Log: log}
	return r.Run(ctx)
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Run runs the task of r.Spec.
func (r *Runner) Run(ctx context.Context) error {
	taskID, err := bson.ObjectIDFromHex(r.Spec.Task)
	if err != nil {
		return fmt.Errorf("task id %q: %w", r.Spec.Task, err)
	}
	log := r.Log.With(zap.String("node", r.Spec.Node), zap.String("task_id", r.Spec.Task), zap.String("plugin", r.Spec.Plugin))
	store := queue.NewStore(r.DB)

	// Claimed -> running, only if the task is still ours.
	startTimeout := r.StartTimeout
	if startTimeout <= 0 {
		startTimeout = 5 * time.Minute
	}
	var doc bson.Raw
	var ok bool
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	err = r.Retry.Retry(sctx, func(ctx context.Context) error {
		doc, ok, err = store.Start(ctx, taskID, r.Spec.Node, r.now())
		return err
	}, func(attempt int, err error) {
		if attempt == 1 {
			log.Warn("cannot start task yet; retrying", zap.Error(err))
		}
	})
	cancel()
	if err != nil {
		return fmt.Errorf("start task %s: %w", r.Spec.Task, err)
	}
	if !ok {
		log.Warn("task is no longer claimed by this node (released, reaped or deleted); not running it")
		return nil
	}

	bucket := gridfs.NewBucket(r.DB, queue.GridFSPrefix)
	// Output is stored with a context that outlives a cancelled task: what
	// the plugin printed before it was stopped is kept.
	storeCtx := context.WithoutCancel(ctx)
	out := newOutputs(storeCtx, bucket, taskID, r.Spec.GFS)

	started := time.Now()
	task, parseErr := queue.ParseTask(doc)
	status := queue.StatusFailed
	var queueID bson.ObjectID
	if task != nil {
		queueID = task.Queue
	}
	switch plugin, found := r.Plugins.Lookup(r.Spec.Plugin); {
	case parseErr != nil:
		out.appendLine("den: task not run: " + parseErr.Error())
	case !found:
		out.appendLine(fmt.Sprintf("den: task not run: no plugin %q is registered in this den binary", r.Spec.Plugin))
	default:
		log.Info("task started")
		status = r.runPlugin(ctx, plugin, task, out, log)
	}

	stdout, stderr, err := out.finish()
	if err != nil {
		// GridFS failed for good: keep what can be kept in the document.
		log.Error("cannot store task output in GridFS", zap.Error(err))
		stdout, stderr = "", "den: output could not be stored: "+err.Error()
	}
	result := queue.Result{Status: status, Stdout: stdout, Stderr: stderr}
	var recorded bool
	r.retryForever(storeCtx, log, "record task result", func(ctx context.Context) error {
		recorded, err = store.Finish(ctx, taskID, r.Spec.Node, result, r.now())
		return err
	})
	if !recorded {
		r.keepOrphanedOutput(storeCtx, store, out, taskID, result, log)
		return nil
	}
	if !queueID.IsZero() {
		r.retryForever(storeCtx, log, "decrement count_todo", func(ctx context.Context) error {
			return store.DecrementTodo(ctx, queueID)
		})
	}
	log.Info("task finished", zap.Int("status", status), zap.String("outcome", queue.StatusName(status)),
		zap.Duration("took", time.Since(started)), zap.Bool("gridfs", isFileID(stdout)))
	return nil
}

// runPlugin calls the plugin, turns a panic or a bad status into a failure
// with the reason in stderr, and returns the status to record.
func (r *Runner) runPlugin(ctx context.Context, p plugins.Plugin, task *queue.Task, out *outputs, log *zap.Logger) (status int) {
	var err error
	func() {
		defer func() {
			if v := recover(); v != nil {
				status, err = 0, nil
				out.appendLine(fmt.Sprintf("den: plugin %s panicked: %v\n\n%s", r.Spec.Plugin, v, debug.Stack()))
				log.Error("plugin panicked", zap.Any("panic", v))
				status = queue.StatusFailed
			}
		}()
		status, err = p.Run(ctx, task, plugins.Env{Stdout: out.stdout, Stderr: out.stderr, DB: r.DB, Log: log})
	}()
	return validate(status, err, out)
}

// validate applies the protocol's rule that a finished task has a positive
// status, and the plugin interface's rule for errors.
func validate(status int, err error, out *outputs) int {
	if err != nil {
		out.appendLine("den: plugin returned an error: " + err.Error())
		if status <= 1 {
			return queue.StatusFailed
		}
		return status
	}
	if status <= 0 {
		out.appendLine(fmt.Sprintf("den: plugin returned status %d; a finished task's status must be a positive integer (1 succeeded, 2 failed): recording 2", status))
		return queue.StatusFailed
	}
	return status
}

// keepOrphanedOutput handles a result that could not be recorded because
// the task changed under the runner: the output goes to GridFS under
// metadata.task_id, and the log says what happened.
func (r *Runner) keepOrphanedOutput(ctx context.Context, store *queue.Store, out *outputs, taskID bson.ObjectID, result queue.Result, log *zap.Logger) {
	var outID, errID bson.ObjectID
	r.retryForever(ctx, log, "store output of a task that changed meanwhile", func(ctx context.Context) error {
		var err error
		outID, errID, err = out.toGridFS(ctx, result.Stdout, result.Stderr)
		return err
	})
	fields := []zap.Field{zap.Int("status", result.Status), zap.String("stdout_file", outID.Hex()), zap.String("stderr_file", errID.Hex())}
	doc, err := store.Task(ctx, taskID)
	switch {
	case err != nil:
		fields = append(fields, zap.NamedError("read_error", err))
	case doc == nil:
		fields = append(fields, zap.String("now", "deleted"))
	default:
		st, _ := doc.Lookup("status").AsInt64OK()
		node, _ := doc.Lookup("node").StringValueOK()
		fields = append(fields, zap.Int64("now_status", st), zap.String("now_node", node))
	}
	log.Warn("task changed while it ran (reaped, rescued or deleted): its state was left as is; output kept in GridFS under metadata.task_id", fields...)
}

// retryForever retries a write that must land, logging when it starts
// failing and when it recovers.
func (r *Runner) retryForever(ctx context.Context, log *zap.Logger, what string, op func(context.Context) error) {
	failures := 0
	err := r.Retry.Retry(ctx, op, func(attempt int, err error) {
		failures = attempt
		if attempt == 1 {
			log.Warn("cannot "+what+"; retrying until it lands", zap.Error(err))
		}
	})
	if err != nil {
		log.Error("gave up: cannot "+what, zap.Error(err))
		return
	}
	if failures > 0 {
		log.Info("done after retrying: "+what, zap.Int("attempts", failures+1))
	}
}

func isFileID(v any) bool {
	_, ok := v.(bson.ObjectID)
	return ok
}
