package devdb

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/internal/testdeadline"
)

// A unique index's refusal reaches clients as MongoDB's E11000 (code
// 11000), on either engine: an insert, an update and an upsert that would
// duplicate a key, and an index the documents already there would break
// (FerretDB answers the last three with an InternalError quoting its
// engine). Other errors stay what they were. Red without the proxy's
// rewrite (mongoDuplicates).
func TestDuplicateKeysAnsweredAsMongoDB(t *testing.T) {
	t.Parallel()
	for _, engine := range []string{EnginePostgreSQL, EngineSQLite} {
		t.Run(engine, func(t *testing.T) {
			t.Parallel()
			if engine == EnginePostgreSQL {
				needPostgres(t)
			}
			ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
			defer cancel()
			srv, err := Start(ctx, Config{Dir: t.TempDir(), Engine: engine})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); <-srv.Done() }()
			c, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Disconnect(context.Background())
			coll := c.Database("d").Collection("c")
			if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "k", Value: 1}}, Options: options.Index().SetUnique(true)}); err != nil {
				t.Fatal(err)
			}
			if _, err := coll.InsertMany(ctx, []any{bson.D{{Key: "k", Value: 1}}, bson.D{{Key: "k", Value: 2}}}); err != nil {
				t.Fatal(err)
			}
			dups := c.Database("d").Collection("dups")
			if _, err := dups.InsertMany(ctx, []any{bson.D{{Key: "k", Value: 1}}, bson.D{{Key: "k", Value: 1}}}); err != nil {
				t.Fatal(err)
			}
			for _, w := range []struct {
				name string
				err  func() error
			}{
				{"insert", func() error { _, err := coll.InsertOne(ctx, bson.D{{Key: "k", Value: 1}}); return err }},
				{"update", func() error {
					_, err := coll.UpdateOne(ctx, bson.D{{Key: "k", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: 1}}}})
					return err
				}},
				{"upsert", func() error {
					_, err := coll.UpdateOne(ctx, bson.D{{Key: "k", Value: 3}, {Key: "x", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
					return err
				}},
				{"findAndModify", func() error {
					return coll.FindOneAndUpdate(ctx, bson.D{{Key: "k", Value: 2}}, bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: 1}}}}).Err()
				}},
				{"index over duplicates", func() error {
					_, err := dups.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "k", Value: 1}}, Options: options.Index().SetUnique(true)})
					return err
				}},
			} {
				err := w.err()
				if err == nil || !mongo.IsDuplicateKeyError(err) {
					t.Errorf("%s that duplicates a key: %v; want MongoDB's duplicate key error (11000)", w.name, err)
				}
			}
			// Another failure is not taken for one.
			_, err = coll.UpdateOne(ctx, bson.D{{Key: "k", Value: 2}}, bson.D{{Key: "$nosuch", Value: bson.D{{Key: "k", Value: 1}}}})
			var se mongo.ServerError
			if err == nil || mongo.IsDuplicateKeyError(err) || !errors.As(err, &se) {
				t.Errorf("an update with an unknown operator: %v; want a server error, not a duplicate key", err)
			}
		})
	}
}
