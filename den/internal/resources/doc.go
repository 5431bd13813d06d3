// Package resources samples the host a node runs on (CPUs, load, memory,
// free disk where its tasks work) with gopsutil, for the resources
// sub-document of the node document. A Sampler samples at most once per
// period and hands out the last sample in between, so the heartbeat that
// writes it can run every second at no cost.
package resources
