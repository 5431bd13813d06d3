package web

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// nodeInfo is what a den node adds to its node document beyond the
// protocol (see docs/documents.md, Nodes): all optional, absent
// on Perl nodes and older den nodes, shown when present.
type nodeInfo struct {
	PID       int64
	Started   time.Time
	Resources *resources
}

// resources is a node's resources sub-document.
type resources struct {
	CPUs          int64
	Load          []float64 // 1, 5 and 15 minutes
	MemoryTotalMB int64
	MemoryAvailMB int64
	DiskPath      string
	DiskFreeMB    int64
	At            time.Time // when sampled
}

// decodeNodeInfo reads the optional fields leniently: a field of another
// type is left out, never an error (the page shows what it can).
func decodeNodeInfo(raw bson.Raw) nodeInfo {
	var n nodeInfo
	n.PID, _ = raw.Lookup("pid").AsInt64OK()
	n.Started = dateOf(raw.Lookup("started"))
	doc, ok := raw.Lookup("resources").DocumentOK()
	if !ok {
		return n
	}
	r := &resources{}
	r.CPUs, _ = doc.Lookup("cpus").AsInt64OK()
	if arr, ok := doc.Lookup("load").ArrayOK(); ok {
		vals, _ := arr.Values()
		for _, v := range vals {
			if f, ok := v.AsFloat64OK(); ok {
				r.Load = append(r.Load, f)
			}
		}
	}
	r.MemoryTotalMB, _ = doc.Lookup("memory_total_mb").AsInt64OK()
	r.MemoryAvailMB, _ = doc.Lookup("memory_available_mb").AsInt64OK()
	r.DiskPath, _ = doc.Lookup("disk_path").StringValueOK()
	r.DiskFreeMB, _ = doc.Lookup("disk_free_mb").AsInt64OK()
	r.At = dateOf(doc.Lookup("at"))
	n.Resources = r
	return n
}

func dateOf(v bson.RawValue) time.Time {
	if dt, ok := v.DateTimeOK(); ok {
		return time.UnixMilli(dt)
	}
	return time.Time{}
}
