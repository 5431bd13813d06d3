package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Name is the plugin name queues use.
const Name = "Disbatch::Plugin::Demo"

// ReportsCollection is where each task's report goes.
const ReportsCollection = "reports"

func init() {
	plugins.Register(Name, plugins.Func(Run))
}

const mib = 1 << 20

// big lists the commands that write bulk output, with the writer and size.
var big = map[rune]struct {
	stderr bool
	size   int
}{
	'1': {false, 1 * mib}, '7': {false, 7 * mib}, '8': {false, 8 * mib}, 'e': {false, 15 * mib},
	'A': {true, 1 * mib}, 'B': {true, 7 * mib}, 'C': {true, 8 * mib}, 'E': {true, 15 * mib},
}

// Run runs one demo task.
func Run(ctx context.Context, t *queue.Task, env plugins.Env) (int, error) {
	var params struct {
		Commands any  `bson:"commands"`
		Counter  any  `bson:"counter"`
		NoReport bool `bson:"noreport"`
	}
	if err := t.DecodeParameters(&params); err != nil {
		return plugins.StatusFailed, err
	}
	commands := fmt.Sprint(params.Commands)
	if params.Commands == nil {
		commands = ""
	}
	report := bson.D{
		{Key: "task_id", Value: t.ID},
		{Key: "attempt", Value: t.Attempts},
		{Key: "queue_id", Value: t.Queue},
		{Key: "counter", Value: params.Counter},
		{Key: "commands", Value: params.Commands},
		{Key: "started", Value: time.Now().Unix()},
	}
	run := commands
	if run == "*" {
		run = "abc"
	}
	status, errors := plugins.StatusSucceeded, 0
	var failure string
	for _, c := range run {
		if err := ctx.Err(); err != nil {
			return plugins.StatusFailed, err
		}
		switch c {
		case 'a':
			io.WriteString(env.Stdout, "This is command 'a' for apple.\n")
		case 'b':
			io.WriteString(env.Stderr, "This is command 'b' for banana.\n")
			errors++
		case 'c':
			io.WriteString(env.Stderr, "This is command 'c' for cry.\n")
			errors++
			status = plugins.StatusFailed
			failure = "Task failed: This is command 'c' for cry.\n"
		default:
			if b, ok := big[c]; ok {
				w := env.Stdout
				if b.stderr {
					w = env.Stderr
				}
				if _, err := w.Write(bytes.Repeat([]byte(string(c)), b.size)); err != nil {
					return plugins.StatusFailed, fmt.Errorf("write %c output: %w", c, err)
				}
			}
		}
		if status != plugins.StatusSucceeded {
			break
		}
	}
	report = append(report,
		bson.E{Key: "errors", Value: errors},
		bson.E{Key: "completed", Value: time.Now().Unix()},
		bson.E{Key: "status", Value: map[bool]string{true: "SUCCESS", false: "FAILED"}[status == plugins.StatusSucceeded]},
	)
	if failure != "" {
		report = append(report, bson.E{Key: "error", Value: failure})
	}
	if !params.NoReport {
		if env.DB == nil {
			return plugins.StatusFailed, fmt.Errorf("no database to write the report to")
		}
		if err := writeReport(ctx, env.DB.Collection(ReportsCollection), t, report); err != nil {
			return plugins.StatusFailed, err
		}
	}
	return status, nil
}

// reportTries is how many times writeReport tries a write that met a
// retryable fault.
const reportTries = 8

// writeReport writes the report of this attempt of task t once, however
// often it is tried: it is keyed by the task and its attempt (an upsert
// that inserts only when no report of them exists), so a write whose
// reply was lost after it landed, tried again, leaves one report. A write
// that met a fault a failover causes (a dropped connection, a primary
// that stepped down) is tried again, up to reportTries times within ctx.
func writeReport(ctx context.Context, reports *mongo.Collection, t *queue.Task, report bson.D) error {
	filter := bson.D{{Key: "task_id", Value: t.ID}, {Key: "attempt", Value: t.Attempts}}
	update := bson.D{{Key: "$setOnInsert", Value: report}}
	wait := 50 * time.Millisecond
	for try := 1; ; try++ {
		_, err := reports.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
		if err == nil {
			return nil
		}
		if try == reportTries || !retryable(err) {
			return fmt.Errorf("write report: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("write report: %w", err)
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// retryable reports whether a write that failed on err may be tried
// again: the connection failed, or the server said so (the
// RetryableWriteError label a replica set puts on the errors of an
// election).
func retryable(err error) bool {
	var le mongo.LabeledError
	return mongo.IsNetworkError(err) || (errors.As(err, &le) && le.HasErrorLabel("RetryableWriteError"))
}
