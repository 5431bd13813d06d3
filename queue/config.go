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
	// Problems lists fields that were ignored because of their type. A
	// malformed activequeues selects no queue at all: failing closed is
	// safer than claiming from queues pinned elsewhere.
	Problems []string
}

// noQueue is an activequeues entry that matches no queue.
const noQueue = "\x00malformed activequeues"

// ActiveConfig reads the config collection's active document. No document
// is an empty SharedConfig. The error is only for a failed read.
func (s *Store) ActiveConfig(ctx context.Context) (SharedConfig, error) {
	var c SharedConfig
	doc, err := s.config.FindOne(ctx, bson.D{{Key: "active", Value: true}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read active config document: %w", err)
	}
	list := func(field string) ([]string, bool) {
		v := doc.Lookup(field)
		if v.Type == 0 || v.Type == bson.TypeNull {
			return nil, true
		}
		arr, ok := v.ArrayOK()
		if !ok {
			c.Problems = append(c.Problems, fmt.Sprintf("config field %s is %s, not an array of queue ids", field, describe(v)))
			return nil, false
		}
		vals, _ := arr.Values()
		out := []string{}
		good := true
		for _, e := range vals {
			switch e.Type {
			case bson.TypeString:
				out = append(out, e.StringValue())
			case bson.TypeObjectID:
				out = append(out, e.ObjectID().Hex())
			default:
				good = false
				c.Problems = append(c.Problems, fmt.Sprintf("config field %s holds %s, not a queue id", field, describe(e)))
			}
		}
		return out, good
	}
	var ok bool
	if c.ActiveQueues, ok = list("activequeues"); !ok {
		c.ActiveQueues = []string{noQueue}
	}
	c.IgnoreQueues, _ = list("ignorequeues")
	if v := doc.Lookup("gfs"); v.Type != 0 && v.Type != bson.TypeNull {
		mode, err := ParseGFS(v)
		if err != nil {
			c.Problems = append(c.Problems, fmt.Sprintf("config field gfs: %v", err))
		} else {
			c.GFS = &mode
		}
	}
	return c, nil
}
