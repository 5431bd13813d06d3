// Package held keeps what a node holds: the tasks under its name that
// are claimed or running, by queue, with what each requested. The
// claimer asks it how many more tasks the node may claim, the pool's
// reports let tasks go, each full pass reads the database's view into
// it, and the heartbeat and the rescuer read it.
package held
