package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// intValue reads a BSON number that must be a whole number: int32, int64, or
// a double without a fractional part (the mongo shell writes doubles by
// default). Anything else is not a whole number.
func intValue(v bson.RawValue) (int64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return int64(v.Int32()), true
	case bson.TypeInt64:
		return v.Int64(), true
	case bson.TypeDouble:
		f := v.Double()
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > 1<<53 {
			return 0, false
		}
		return int64(f), true
	}
	return 0, false
}

// timeValue reads a modification time written either as an ISODate or, by
// older writers, as a number of seconds since the epoch.
func timeValue(v bson.RawValue) (time.Time, bool) {
	switch v.Type {
	case bson.TypeDateTime:
		return v.Time(), true
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		f, _ := v.AsFloat64OK()
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true
	}
	return time.Time{}, false
}

// describe renders a BSON value for an error message a user will read.
func describe(v bson.RawValue) string {
	if v.Type == 0 {
		return "missing"
	}
	s := v.String()
	if len(s) > 60 {
		s = s[:57] + "..."
	}
	return fmt.Sprintf("%s (%s)", s, v.Type)
}

// anyTask reports whether filter matches a document of tasks: one find
// of an _id. A sweep's update of many tasks asks it first and writes
// only when something matches: the development server reads every task
// for an update it cannot push down, and answers such a find from
// PostgreSQL (den/devdb's find path); on MongoDB the find takes the
// index the update would. A document that comes to match between the
// two is the next sweep's.
func anyTask(ctx context.Context, tasks *mongo.Collection, filter bson.D) (bool, error) {
	err := tasks.FindOne(ctx, filter, options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return false, nil
	}
	return err == nil, err
}
