package dci

import (
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

func bsonID(id bson.ObjectID) zap.Field { return zap.String("queue_id", id.Hex()) }
func errField(err error) zap.Field      { return zap.Error(err) }

func fieldTask(raw bson.Raw) zap.Field { return zap.String("task_id", queue.DocID(raw)) }
