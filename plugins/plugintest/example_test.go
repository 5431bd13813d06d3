package plugintest_test

import (
	"context"
	"fmt"
	"io"
	"log"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/plugintest"
	"github.com/den-project/den/queue"
)

// A plugin written as a function, run on one task.
func Example() {
	shout := plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		var params struct {
			Words string `bson:"words"`
		}
		if err := task.DecodeParameters(&params); err != nil {
			return plugins.StatusFailed, err
		}
		io.WriteString(env.Stdout, params.Words+"!\n")
		return plugins.StatusSucceeded, env.Record("length", len(params.Words))
	})

	ctx := context.Background()
	srv, err := plugintest.Start(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	res, err := srv.Run(ctx, shout, bson.D{{Key: "words", Value: "hello"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Status, " ", res.Stdout)
	fmt.Println(res.Records)
	// Output:
	// 1 hello!
	// map[length:5]
}
