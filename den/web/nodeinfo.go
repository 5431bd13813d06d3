package web

import (
	"time"

	"github.com/den-project/den/queue"
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

// nodeInfoOf is what the page shows of what n says of itself, as queue
// decoded it (leniently: a field of another type is left out, never an
// error; the page shows what it can).
func nodeInfoOf(n queue.NodeDoc) nodeInfo {
	info := nodeInfo{PID: n.PID, Started: n.Started}
	if r := n.Resources; r != nil {
		info.Resources = &resources{CPUs: int64(r.CPUs), Load: r.Load, MemoryTotalMB: r.MemoryTotalMB, MemoryAvailMB: r.MemoryAvailableMB,
			DiskPath: r.DiskPath, DiskFreeMB: r.DiskFreeMB, At: r.At}
	}
	return info
}
