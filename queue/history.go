package queue

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// History returns the runs of a task that were retried or rescued, oldest
// first (the history field, den's own). A task without history has none;
// an entry that cannot be decoded is an error naming its position.
func (t Task) History() ([]HistoryEntry, error) {
	v := t.Raw.Lookup(FieldHistory)
	if absent(v) {
		return nil, nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, fmt.Errorf("history is %s, not an array", describe(v))
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	out := make([]HistoryEntry, 0, len(vals))
	for i, e := range vals {
		doc, ok := e.DocumentOK()
		if !ok {
			return out, fmt.Errorf("history entry %d is %s, not a document", i+1, describe(e))
		}
		var h HistoryEntry
		if err := bson.Unmarshal(doc, &h); err != nil {
			return out, fmt.Errorf("history entry %d: %w", i+1, err)
		}
		out = append(out, h)
	}
	return out, nil
}
