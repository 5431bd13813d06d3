// Package schedule fires the schedules whose time has come: one task per
// scheduled time (queue.NodeStore.FireDue), whichever node fires it.
package schedule
