package queue

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// SharedConfig is what a node reads from the active document of the config
// collection ({active: true}), which Disbatch uses to configure all nodes
// at once. A nil field was not set there.
type SharedConfig struct {
	ActiveQueues []string
	IgnoreQueues []string
	GFS          *string
}

// ActiveConfig reads the config collection's active document. No document
// is an empty SharedConfig; a field of the wrong type is an error naming it.
func (s *Store) ActiveConfig(ctx context.Context) (SharedConfig, error) {
	var c SharedConfig
	doc, err := s.config.FindOne(ctx, bson.D{{Key: "active", Value: true}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read active config document: %w", err)
	}
	var problems []error
	list := func(field string) []string {
		v := doc.Lookup(field)
		if v.Type == 0 || v.Type == bson.TypeNull {
			return nil
		}
		arr, ok := v.ArrayOK()
		if !ok {
			problems = append(problems, fmt.Errorf("config field %s is %s, not an array of queue ids", field, describe(v)))
			return nil
		}
		vals, _ := arr.Values()
		out := []string{}
		for _, e := range vals {
			switch e.Type {
			case bson.TypeString:
				out = append(out, e.StringValue())
			case bson.TypeObjectID:
				out = append(out, e.ObjectID().Hex())
			default:
				problems = append(problems, fmt.Errorf("config field %s holds %s, not a queue id", field, describe(e)))
			}
		}
		return out
	}
	c.ActiveQueues = list("activequeues")
	c.IgnoreQueues = list("ignorequeues")
	if v := doc.Lookup("gfs"); v.Type != 0 && v.Type != bson.TypeNull {
		mode, err := ParseGFS(v)
		if err != nil {
			problems = append(problems, fmt.Errorf("config field gfs: %w", err))
		} else {
			c.GFS = &mode
		}
	}
	return c, errors.Join(problems...)
}
