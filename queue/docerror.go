package queue

import (
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// IsDocumentError reports whether err is about a document den read (it
// did not decode as what its collection holds) rather than about the
// database: a node tells "a malformed document" apart from "MongoDB
// unreachable" by it. Every query of this package reads documents so that
// no malformed document makes it fail (see hostile_test.go); this tells
// what went wrong where one does all the same.
func IsDocumentError(err error) bool {
	var de *bson.DecodeError
	var ve bson.ValueDecoderError
	return errors.As(err, &de) || errors.As(err, &ve)
}
