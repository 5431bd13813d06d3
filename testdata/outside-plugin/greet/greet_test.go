package greet_test

import (
	"context"
	"fmt"
	"log"

	"go.mongodb.org/mongo-driver/v2/bson"

	"example.com/myplugin/greet"
	"github.com/den-project/den/plugins/plugintest"
)

func Example() {
	ctx := context.Background()
	srv, err := plugintest.Start(ctx) // den's embedded database, in this process
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	res, err := srv.Run(ctx, greet.Plugin{}, bson.D{{Key: "name", Value: "Ada"}},
		plugintest.Config(map[string]any{"greeting": "Welcome"}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status %d, stdout %q, greeted %v\n", res.Status, res.Stdout, res.Records["greeted"])

	res, err = srv.Run(ctx, greet.Plugin{}, bson.D{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status %d, stderr %q\n", res.Status, res.Stderr)
	// Output:
	// status 1, stdout "Welcome, Ada!\n", greeted Ada
	// status 2, stderr "greet: the task has no name parameter\n"
}
