package queue

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// This file holds the node documents as operators read and change them.

// NodeDoc is a node document as an operator reads it.
type NodeDoc struct {
	Name      string
	Timestamp time.Time // zero when not a date
	Queues    []NodeQueue
	// MaxThreads is the operator's node-wide limit (nil: none);
	// MaxThreadsProblem is set when it is not a non-negative whole number.
	MaxThreads        *int
	MaxThreadsProblem string
	// Version is the node's version, when it writes one.
	Version string
	// QueuesLeftOut is how many queues a den node serves but left out of
	// its queues array (den.NodeQueuesMax).
	QueuesLeftOut int
	// Stopped is when a den node said, as it stopped cleanly, that it
	// stopped (zero: it did not; see FieldStopped).
	Stopped time.Time
	// PID, Started and Resources are what a den node says of itself
	// (NodeSelf), read leniently: a field of another type is left out
	// (zero, or nil), never an error; Perl nodes write none of them.
	PID       int64
	Started   time.Time
	Resources *NodeResources
	Raw       bson.Raw
}

// Live reports whether the node is alive at now: it wrote its document
// within deadAfter, and did not say it stopped since.
func (n NodeDoc) Live(now time.Time, deadAfter time.Duration) bool {
	return !n.Timestamp.IsZero() && now.Sub(n.Timestamp) <= deadAfter && !n.StoppedCleanly()
}

// Node states, as den node list and the page show them.
const (
	NodeRunning = "running" // wrote its document within dead_node_after
	NodeStopped = "stopped" // said it stopped, as it stopped cleanly
	NodeDead    = "dead"    // silent for longer than dead_node_after, without saying it stopped
)

// State is the node's state at now: NodeStopped, NodeRunning or NodeDead.
func (n NodeDoc) State(now time.Time, deadAfter time.Duration) string {
	switch {
	case n.StoppedCleanly():
		return NodeStopped
	case n.Live(now, deadAfter):
		return NodeRunning
	}
	return NodeDead
}

// StoppedCleanly reports whether the node said it stopped, and has not
// written its document since.
func (n NodeDoc) StoppedCleanly() bool {
	return !n.Stopped.IsZero() && !n.Stopped.Before(n.Timestamp)
}

// ID is the node document's _id as stored: an ObjectId for every node
// den or Disbatch writes, any value for one a client wrote.
func (n NodeDoc) ID() bson.RawValue { return n.Raw.Lookup("_id") }

// TimestampMillis is the node's timestamp in milliseconds since the
// epoch, when it is stored as a date (Disbatch's web API answers it so).
func (n NodeDoc) TimestampMillis() (int64, bool) {
	return n.Raw.Lookup("timestamp").DateTimeOK()
}

// NamedAs reports whether the node's name, stored as text, is name.
func (n NodeDoc) NamedAs(name string) bool {
	got, ok := n.Raw.Lookup("node").StringValueOK()
	return ok && got == name
}

// DocID is a document's _id as text, for a log line or an error message
// ("" when it has none).
func DocID(raw bson.Raw) string {
	v := raw.Lookup("_id")
	if v.Type == 0 {
		return ""
	}
	if id, ok := v.ObjectIDOK(); ok {
		return id.Hex()
	}
	return v.String()
}

// Nodes returns every node document, by name.
func (s *Store) Nodes(ctx context.Context) ([]NodeDoc, error) {
	cur, err := s.nodes.Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "node", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("read node documents: %w", err)
	}
	defer cur.Close(ctx)
	var out []NodeDoc
	for cur.Next(ctx) {
		n := decodeNodeDoc(append(bson.Raw(nil), cur.Current...))
		out = append(out, n)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read node documents: %w", err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// decodeNodeDoc reads a node document leniently: what cannot be read is
// left zero.
func decodeNodeDoc(raw bson.Raw) NodeDoc {
	n := NodeDoc{Raw: raw}
	if name, ok := raw.Lookup("node").StringValueOK(); ok {
		n.Name = name
	} else {
		n.Name = raw.Lookup("node").String()
	}
	n.Timestamp, _ = timeValue(raw.Lookup("timestamp"))
	if arr, ok := raw.Lookup("queues").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			var nq NodeQueue
			if doc, ok := v.DocumentOK(); ok && bson.Unmarshal(doc, &nq) == nil {
				n.Queues = append(n.Queues, nq)
			}
		}
	}
	if v := raw.Lookup("maxthreads"); !absent(v) {
		if m, ok := intValue(v); ok && m >= 0 {
			mt := int(min(m, 1<<20))
			n.MaxThreads = &mt
		} else {
			n.MaxThreadsProblem = fmt.Sprintf("maxthreads is %s, not a non-negative whole number or null; nodes treat it as 0", describe(v))
		}
	}
	n.Version, _ = raw.Lookup("version").StringValueOK()
	if left, ok := intValue(raw.Lookup("queues_left_out")); ok {
		n.QueuesLeftOut = int(left)
	}
	n.Stopped, _ = timeValue(raw.Lookup(FieldStopped))
	n.PID, _ = raw.Lookup("pid").AsInt64OK()
	n.Started = dateOf(raw.Lookup("started"))
	n.Resources = decodeNodeResources(raw.Lookup("resources"))
	return n
}

// decodeNodeResources reads a node document's resources leniently: a
// field of another type is left out; nil when it is not a document.
func decodeNodeResources(v bson.RawValue) *NodeResources {
	doc, ok := v.DocumentOK()
	if !ok {
		return nil
	}
	r := &NodeResources{}
	cpus, _ := doc.Lookup("cpus").AsInt64OK()
	r.CPUs = int(cpus)
	if arr, ok := doc.Lookup("load").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			if f, ok := v.AsFloat64OK(); ok {
				r.Load = append(r.Load, f)
			}
		}
	}
	r.MemoryTotalMB, _ = doc.Lookup("memory_total_mb").AsInt64OK()
	r.MemoryAvailableMB, _ = doc.Lookup("memory_available_mb").AsInt64OK()
	r.DiskPath, _ = doc.Lookup("disk_path").StringValueOK()
	r.DiskFreeMB, _ = doc.Lookup("disk_free_mb").AsInt64OK()
	r.At = dateOf(doc.Lookup("at"))
	return r
}

// dateOf is a BSON date as a time in the local zone; zero for anything
// else.
func dateOf(v bson.RawValue) time.Time {
	if dt, ok := v.DateTimeOK(); ok {
		return time.UnixMilli(dt)
	}
	return time.Time{}
}

// SetNodeMaxThreads sets a node's node-wide limit (nil removes it: no
// limit). The node must have a document: a typo is an error, not a new
// node.
func (s *Store) SetNodeMaxThreads(ctx context.Context, node string, limit *int) error {
	update := bson.D{{Key: "$unset", Value: bson.D{{Key: "maxthreads", Value: ""}}}}
	if limit != nil {
		update = bson.D{{Key: "$set", Value: bson.D{{Key: "maxthreads", Value: int32(*limit)}}}}
	}
	res, err := s.nodes.UpdateOne(ctx, bson.D{{Key: "node", Value: node}}, update)
	if err != nil {
		return fmt.Errorf("set maxthreads of node %s: %w", node, err)
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("%w for node %q", ErrNoNode, node)
	}
	return nil
}
