package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// NodeQueue is one entry of a node document's queues array.
type NodeQueue struct {
	Name          string `bson:"name"`
	ID            string `bson:"id"` // the queue's _id as a hex string
	Constructor   string `bson:"constructor"`
	MaxThreads    int    `bson:"maxthreads"`
	TasksTodo     int64  `bson:"tasks_todo"`
	TasksDoing    int64  `bson:"tasks_doing"`
	TasksDone     int64  `bson:"tasks_done"`
	Preemptive    int    `bson:"preemptive"`     // always 1, for legacy readers
	TasksBackfill int    `bson:"tasks_backfill"` // always 0, for legacy readers
}

// NodeQueueNameMax is the longest queue name a node document's entry
// holds, in bytes: a queue's name is whatever its writer put there, up to
// megabytes, and the node document is rewritten every pass. A longer name
// is cut (at a rune boundary) and ends with "…"; the entry's id names the
// queue exactly.
const NodeQueueNameMax = 1024

// NodeQueueName is a queue's name as a node document's entry has it: cut
// to NodeQueueNameMax bytes, with "…".
func NodeQueueName(name string) string { return cutName(name, NodeQueueNameMax) }

// NewNodeQueue fills a node document's queue entry the way the protocol
// defines it: tasks_todo is count_todo minus the running tasks, tasks_done
// is count_total minus count_todo, none below zero.
func NewNodeQueue(q Queue, doing int) NodeQueue {
	name := NodeQueueName(q.Name)
	var todo, total int64
	if q.CountTodo != nil {
		todo = *q.CountTodo
	}
	if q.CountTotal != nil {
		total = *q.CountTotal
	}
	return NodeQueue{
		Name:        name,
		ID:          q.ID.Hex(),
		Constructor: q.Plugin,
		MaxThreads:  q.MaxThreads,
		TasksTodo:   max(todo-int64(doing), 0),
		TasksDoing:  int64(doing),
		TasksDone:   max(total-todo, 0),
		Preemptive:  1,
	}
}

// FieldStopped is when a den node stopped cleanly: it writes it in its node
// document, with its last timestamp, as it stops (Stopped), and a later
// heartbeat of the same name supersedes it. A Perl node ignores it.
const FieldStopped = "stopped"

// NodeLimit is the node-wide limit an operator may set in the node
// document's maxthreads: nil means no limit, 0 means run nothing.
type NodeLimit = *int

// NodeSelf is what a den node says of itself in its node document, beyond
// the protocol's fields: all optional, written with the heartbeat's $set (no
// command of their own), ignored by Perl nodes and by readers that do not
// know them.
type NodeSelf struct {
	// Version is den's version.
	Version string
	// PID is the node process's pid; Started is when that process started.
	PID     int
	Started time.Time
	// Resources is the host as last sampled; nil leaves the field as it is.
	Resources *NodeResources
	// QueuesLeftOut is how many queues the node serves or runs but left
	// out of its queues array, which has a cap (den.NodeQueuesMax).
	QueuesLeftOut int
	// Stopped is set in the node's last write, as it stops cleanly
	// (FieldStopped); every other write removes the field.
	Stopped time.Time
	// Plugins are the plugins the node runs tasks with (FieldPlugins):
	// those of its binary that its configuration does not keep off.
	Plugins []string
	// Housekeeping is the node's last completed round of housekeeping
	// (FieldHousekeeping); nil leaves the field as it is.
	Housekeeping *Housekeeping
}

// FieldHousekeeping is den's field of the node document that says when
// the node last completed a round of its housekeeping (rescues, sweeps,
// counts, stats, schedules, retention), which runs beside its claims.
const FieldHousekeeping = "housekeeping"

// Housekeeping is the housekeeping sub-document of a node document: when
// the node's last completed round started and ended, and when the full
// pass whose queues it worked on started.
type Housekeeping struct {
	Pass    time.Time `bson:"pass"`
	Started time.Time `bson:"started"`
	Ended   time.Time `bson:"ended"`
}

// FieldPlugins is the node document's list of the plugins a den node
// serves; the Disbatch web API (GET /plugins) lists those of live nodes.
// Perl nodes do not write it.
const FieldPlugins = "plugins"

// NodeResources is the resources sub-document of a node document: the host
// as the node last sampled it.
type NodeResources struct {
	CPUs int `bson:"cpus"`
	// Load is the load average over 1, 5 and 15 minutes.
	Load              []float64 `bson:"load"`
	MemoryTotalMB     int64     `bson:"memory_total_mb"`
	MemoryAvailableMB int64     `bson:"memory_available_mb"`
	// DiskPath is where the node's tasks work and spool (the node's working
	// directory), and DiskFreeMB the space free there for unprivileged use.
	DiskPath   string    `bson:"disk_path"`
	DiskFreeMB int64     `bson:"disk_free_mb"`
	At         time.Time `bson:"at"`
	// Offer is the most the node gives tasks' requested_resources: its
	// configured limit, else the machine's (see den.ResourceLimits). Other
	// nodes read it to tell a request no node can meet (Offers).
	Offer *Resources `bson:"offer,omitempty"`
}

// fields returns the $set fields of ns: only those it has.
func (ns *NodeSelf) fields() bson.D {
	if ns == nil {
		return nil
	}
	var d bson.D
	if ns.Version != "" {
		d = append(d, bson.E{Key: "version", Value: ns.Version})
	}
	if ns.PID > 0 {
		d = append(d, bson.E{Key: "pid", Value: ns.PID})
	}
	if !ns.Started.IsZero() {
		d = append(d, bson.E{Key: "started", Value: ns.Started})
	}
	if ns.Resources != nil {
		d = append(d, bson.E{Key: "resources", Value: ns.Resources})
	}
	d = append(d, bson.E{Key: "queues_left_out", Value: ns.QueuesLeftOut})
	if ns.Plugins != nil {
		d = append(d, bson.E{Key: FieldPlugins, Value: ns.Plugins})
	}
	if ns.Housekeeping != nil {
		d = append(d, bson.E{Key: FieldHousekeeping, Value: ns.Housekeeping})
	}
	if !ns.Stopped.IsZero() {
		d = append(d, bson.E{Key: FieldStopped, Value: ns.Stopped})
	}
	return d
}

// WriteNodeDocument upserts the node document: node, timestamp, queues and what
// the node says of itself (self, may be nil), in one command. queues nil
// leaves the queues array as it is: a node whose queues have not changed
// writes its timestamp only (den's first pass, and one every RefreshEvery,
// writes them whatever they are, so that a node document deleted by hand
// gets them back). It never writes
// maxthreads, which belongs to the operator, and returns the value the
// operator set there. It removes stopped unless self sets it: the node
// runs. Problem is non-empty when that value is not a
// non-negative whole number (it then counts as 0).
func (s *Store) WriteNodeDocument(ctx context.Context, node string, queues []NodeQueue, self *NodeSelf, now time.Time) (limit NodeLimit, problem string, err error) {
	set := bson.D{{Key: "timestamp", Value: now}}
	if queues != nil {
		set = append(set, bson.E{Key: "queues", Value: queues})
	}
	set = append(set, self.fields()...)
	update := bson.D{{Key: "$set", Value: set}}
	if self == nil || self.Stopped.IsZero() {
		update = append(update, bson.E{Key: "$unset", Value: bson.D{{Key: FieldStopped, Value: ""}}})
	}
	doc, err := s.nodes.FindOneAndUpdate(ctx,
		bson.D{{Key: "node", Value: node}},
		update,
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After),
	).Raw()
	if err != nil {
		return nil, "", fmt.Errorf("update node document of %s: %w", node, err)
	}
	v := doc.Lookup("maxthreads")
	if v.Type == 0 || v.Type == bson.TypeNull {
		return nil, "", nil
	}
	n, ok := intValue(v)
	if !ok || n < 0 {
		zero := 0
		return &zero, fmt.Sprintf("node maxthreads is %s, not a non-negative whole number or null; treating it as 0", describe(v)), nil
	}
	limit = new(int)
	*limit = int(min(n, 1<<20))
	return limit, "", nil
}

// WriteNodeTimestamp writes only the timestamp of the node document: the node is alive
// while a slow pass has not yet written the whole document.
func (s *Store) WriteNodeTimestamp(ctx context.Context, node string, now time.Time) error {
	_, err := s.nodes.UpdateOne(ctx, bson.D{{Key: "node", Value: node}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "timestamp", Value: now}}}}, options.UpdateOne().SetUpsert(true))
	if err != nil {
		return fmt.Errorf("update timestamp of node %s: %w", node, err)
	}
	return nil
}

// Offers returns what each node that wrote its document at or after since
// offers tasks' requested_resources (resources.offer), by node name. Nodes
// that write none (Perl nodes, older den nodes) are left out.
func (s *Store) Offers(ctx context.Context, since time.Time) (map[string]Resources, error) {
	seen, offers, err := s.NodesSeenOffers(ctx)
	if err != nil {
		return nil, fmt.Errorf("read what nodes offer: %w", err)
	}
	return LiveOffers(seen, offers, since), nil
}

// LiveOffers keeps of offers those of the nodes seen (their document
// written) at or after since.
func LiveOffers(seen map[string]time.Time, offers map[string]Resources, since time.Time) map[string]Resources {
	live := make(map[string]Resources, len(offers))
	for name, o := range offers {
		if !seen[name].Before(since) {
			live[name] = o
		}
	}
	return live
}

// ErrNodeLive is returned by ForgetNode for a node that is alive.
var ErrNodeLive = errors.New("the node is alive")

// ForgetNode removes the node document of a node that stopped or is dead
// (silent for longer than deadAfter), and returns what it removed. It
// refuses a live node (ErrNodeLive) and a node that still holds tasks
// (claimed or running under its name: the rescue of a dead node's tasks
// needs nothing of its document, but an operator should see them first).
// The delete is conditional on the timestamp read, so a node that writes
// its document meanwhile keeps it.
func (s *Store) ForgetNode(ctx context.Context, name string, now time.Time, deadAfter time.Duration) (NodeDoc, error) {
	var n NodeDoc
	raw, err := s.nodes.FindOne(ctx, bson.D{{Key: "node", Value: name}}).Raw()
	if errors.Is(err, mongo.ErrNoDocuments) {
		return n, fmt.Errorf("forget node %s: %w for node %q", name, ErrNoNode, name)
	}
	if err != nil {
		return n, fmt.Errorf("forget node %s: %w", name, err)
	}
	n = decodeNodeDoc(raw)
	if n.Live(now, deadAfter) {
		return n, fmt.Errorf("forget node %s: %w: it wrote its node document %s ago; stop it first (a node silent for %s is dead)",
			name, ErrNodeLive, now.Sub(n.Timestamp).Round(time.Second), deadAfter)
	}
	tasks, err := s.NodeTasks(ctx, name)
	if err != nil {
		return n, fmt.Errorf("forget node %s: count its tasks: %w", name, err)
	}
	held := len(tasks)
	if held > 0 {
		return n, fmt.Errorf("forget node %s: it still holds %d claimed or running tasks (den task list --node %s --status claimed,running); they are rescued once it is dead, or cancel them", name, held, name)
	}
	res, err := s.nodes.DeleteOne(ctx, bson.D{{Key: "node", Value: name}, {Key: "timestamp", Value: bson.D{{Key: "$eq", Value: raw.Lookup("timestamp")}}}})
	if err != nil {
		return n, fmt.Errorf("forget node %s: %w", name, err)
	}
	if res.DeletedCount == 0 {
		return n, fmt.Errorf("forget node %s: it wrote its node document meanwhile; look again (den node list)", name)
	}
	return n, nil
}
