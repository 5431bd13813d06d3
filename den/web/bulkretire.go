package web

import (
	"context"
	"fmt"
	"net/http"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// retirePage is how many tasks one page of a bulk purge or archive reads
// (den task purge's batch).
const retirePage = 500

// retireModes are the bulk actions that remove ended tasks, as den task
// purge and den task archive do.
var retireModes = map[string]queue.RetireMode{"purge": queue.RetireDelete, "archive": queue.RetireArchive}

// retireMatch is bulkMatch for purge and archive: upto is the form's, or
// the newest ended task f selects; b.Matched counts the ended tasks up to
// it, and f selects them.
func retireMatch(ctx context.Context, rt queue.OperatorStore, r *http.Request, f *queue.RetireFilter, b *bulkData) (int, error) {
	var upto bson.ObjectID
	if v := r.PostForm.Get("upto"); v != "" {
		var err error
		if upto, err = bson.ObjectIDFromHex(v); err != nil {
			return http.StatusBadRequest, fmt.Errorf("upto %q: want a task id", v)
		}
	} else {
		var err error
		if upto, err = rt.RetireNewest(ctx, *f); err != nil {
			return http.StatusInternalServerError, err
		}
	}
	if upto.IsZero() {
		return 0, nil
	}
	f.Before = next(upto)
	b.Upto = upto.Hex()
	var err error
	if b.Matched, err = rt.RetireCount(ctx, *f); err != nil {
		return http.StatusInternalServerError, err
	}
	return 0, nil
}

// retireAct purges or archives (b.Action) at most BulkMax of the tasks f
// selects, oldest first, a page at a time, and counts in b.Done those it
// removed: a task whose status changed meanwhile, or that a task not yet
// ended comes after, stays.
func retireAct(ctx context.Context, rt queue.OperatorStore, f queue.RetireFilter, b *bulkData) error {
	mode := retireModes[b.Action]
	read := 0
	for read < BulkMax {
		f.Limit = int64(min(retirePage, BulkMax-read))
		tasks, n, last, err := rt.RetirePage(ctx, f)
		if err != nil {
			return fmt.Errorf("after %d of %d: %w", b.Done, b.Matched, err)
		}
		read += n
		if len(tasks) > 0 {
			done, err := rt.RetireTasks(ctx, tasks, mode)
			b.Done += int(done.Tasks)
			if err != nil {
				return fmt.Errorf("after %d of %d: %w", b.Done, b.Matched, err)
			}
		}
		if int64(n) < f.Limit {
			return nil
		}
		f.AfterID = last
	}
	return nil
}
