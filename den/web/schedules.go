package web

import (
	"net/http"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/queue"
)

// scheduleView is one schedule as the page lists it.
type scheduleView struct {
	queue.Schedule
	QueueName string
	When      string
	// LastStatus is the status of the last task it inserted; HasLast is
	// false when there is none (or it is gone: LastGone).
	LastStatus int
	HasLast    bool
	LastGone   bool
}

func (h *handler) schedules(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	scs, err := h.store.Schedules(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	queues, _, err := h.store.Queues(ctx)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	names := map[bson.ObjectID]string{}
	for _, q := range queues {
		names[q.ID] = queue.ShownName(q.Name)
	}
	var last []bson.ObjectID
	for _, sc := range scs {
		if !sc.LastTask.IsZero() {
			last = append(last, sc.LastTask)
		}
	}
	statuses, err := h.store.Statuses(ctx, last)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err)
		return
	}
	h.dbOK()
	views := make([]scheduleView, 0, len(scs))
	for _, sc := range scs {
		v := scheduleView{Schedule: sc, QueueName: names[sc.Queue], When: scheduleWhen(sc)}
		if v.QueueName == "" {
			v.QueueName = sc.Queue.Hex()
		}
		if !sc.LastTask.IsZero() {
			v.LastStatus, v.HasLast = statuses[sc.LastTask]
			v.LastGone = !v.HasLast
		}
		views = append(views, v)
	}
	h.render(w, r, "schedules", page{Title: "Schedules", Nav: "schedules", Refresh: int(h.refresh.Seconds()), Data: views})
}

// scheduleWhen says when a schedule fires.
func scheduleWhen(sc queue.Schedule) string {
	if sc.Every > 0 {
		return "every " + sc.Every.String()
	}
	tz := sc.TZ
	if tz == "" {
		tz = "UTC"
	}
	return sc.Cron + " (" + tz + ")"
}
