package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/config"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/queue"
)

func newOutputCmd() *cobra.Command {
	var stderr bool
	cmd := &cobra.Command{
		Use:   "output TASK_ID",
		Short: "Print a task's stdout (or --stderr), from the task document or GridFS",
		Long: `Print a task's stdout, or its stderr with --stderr, exactly as stored: from
the task document, or streamed from Disbatch's GridFS (tasks.files and
tasks.chunks) when the output is a file id. Uses the same configuration as
den run (--config, DEN_MONGO_URI, --mongo-uri, ...).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load("", cmd.Flags())
			if err != nil {
				return err
			}
			if cfg.MongoURI == "" {
				return fmt.Errorf("no MongoDB configured: give --config, DEN_MONGO_URI or --mongo-uri")
			}
			id, err := bson.ObjectIDFromHex(args[0])
			if err != nil {
				return fmt.Errorf("task id %q: %w", args[0], err)
			}
			field := "stdout"
			if stderr {
				field = "stderr"
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			return printOutput(ctx, cfg, id, field, os.Stdout)
		},
	}
	cmd.Flags().BoolVar(&stderr, "stderr", false, "print stderr instead of stdout")
	config.AddFlags(cmd.Flags())
	return cmd
}

func printOutput(ctx context.Context, cfg config.Config, id bson.ObjectID, field string, w io.Writer) error {
	client, err := connect(cfg.MongoURI, "den output")
	if err != nil {
		return err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	db := client.Database(cfg.Database)
	doc, err := queue.NewStore(db).Task(ctx, id)
	if err != nil {
		return err
	}
	if doc == nil {
		return fmt.Errorf("no task %s in database %s", id.Hex(), cfg.Database)
	}
	text, file, err := doc.Output(field)
	switch {
	case errors.Is(err, queue.ErrNoOutput):
		return fmt.Errorf("task %s has no %s yet (status %d, %s)", id.Hex(), field, doc.Status, queue.StatusName(doc.Status))
	case err != nil:
		return fmt.Errorf("task %s: %w", id.Hex(), err)
	case file.IsZero():
		_, err = io.WriteString(w, text)
		return err
	}
	r, err := gridfs.NewBucket(db, queue.GridFSPrefix).Open(ctx, file)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}
