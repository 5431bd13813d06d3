// Package relay lets task runners reach MongoDB through their node's own
// connection pool, so a task opens no server connection of its own: no
// handshake, no TLS or SCRAM round trips, no endSessions at exit.
//
// A Relay is a small MongoDB wire-protocol endpoint. It reads OP_MSG
// requests (and the driver's legacy OP_QUERY handshake), answers hello,
// isMaster, ping and endSessions itself (as a standalone server with the
// real server's limits), and runs every other command through a
// *mongo.Client with RunCommand, sending the server's reply back as it
// came. Each client logical session (lsid) maps to a session of the
// relay's client, so a getMore runs in the session of the find that made
// its cursor, as the server requires. Transactions are refused.
//
// Nothing listens: a node hands each runner one end of a unix socketpair
// (ControlPair, ServeControl), and the runner's Dialer asks for each new
// connection over it, receiving a socket by SCM_RIGHTS. When the node goes
// away, the Dialer serves new connections from a relay in the runner's
// own process backed by a direct client, so a node restart never stops a
// running task.
package relay
