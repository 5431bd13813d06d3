// Package queueset reads queue settings given as text on den's command line
// (den queue create and den queue set: key=value) into queue.QueueSettings.
// Each value is checked with the decoder the nodes read it with (queue's
// Decode functions), so that what an operator writes is what every node
// reads; what the queue document may hold, and how it is written, stays in
// queue.
package queueset
