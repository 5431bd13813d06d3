// Package web is den's status page: an http.Handler that shows, from the
// Disbatch database, the queues (todo, running, done, failed and what
// finished lately), the nodes (heartbeat age, running tasks per queue,
// maxthreads, resources), a filtered task list, and each task's document,
// history and output, with the output of a running task polled from a
// JSON endpoint (its live output while it runs on a den node, see
// queue/live.go). `den web` serves it; New builds it from injected
// dependencies, so another server (a node's HTTP endpoint) can mount it.
//
// Everything is read and written through queue.OperatorStore, with the functions
// the operator's command line uses (TaskCounts, ListTasks, Nodes, Cancel,
// RetryEnded, SetNodeMaxThreads, ...): this package names no document
// field of the protocol. The one exception is display-only: the optional
// fields a den node adds to its node document (version, pid, started,
// resources) are decoded leniently in nodeinfo.go.
//
// Pages are rendered on the server with html/template; the CSS and the
// little JavaScript (auto-refresh, output polling, local times) are
// embedded with embed, with no build step. Without JavaScript every page
// still works, only without refreshing itself.
//
// Actions (cancel a task, retry an ended task, pause or resume a queue,
// set a node's maxthreads) exist only when Options.Token is set, and every
// action request is checked against it: the token itself in an Authorization: Bearer header
// or a form field named token (for scripts), or the session cookie that
// logging in on /login sets. A session is a random id (32 bytes from
// crypto/rand) kept in this process's memory with a CSRF value of its
// own; it ends on POST /logout, after SessionIdle unused, SessionLifetime
// after login, and with the process (so changing the token, which means a
// restart, ends every session); at most MaxSessions are kept. Cookie
// actions must also carry the session's CSRF field, and any action from
// another origin (Origin or Sec-Fetch-Site) is refused. Actions are POSTs
// only. The right token is accepted at once from any address, always;
// wrong tokens are limited per client address (the connection's IP, never
// a header): after LoginFailures within LoginWindow, the address's wrong
// tokens are answered with 429 and Retry-After, after LoginSlowdown, for
// LoginLimit, logged once when the limit starts and once when it ends.
// Since every token is compared, what bounds guessing is the token's
// strength, which den/config checks at start. Without a token the page
// is read-only: no action is shown and every action is refused with 403.
//
// The page answers only its own host names (hosts.go): the listen
// address, localhost, the hostname when it listens beyond loopback, and
// Options.Hosts (web.hosts); any other Host header gets 421 and nothing
// of the page, so that a page elsewhere cannot read it by pointing its
// own name at this server (DNS rebinding). Reading is open to whoever
// reaches the server by one of those names, which is why den web listens
// on localhost unless configured otherwise.
//
// Every read is bounded (readbounds.go): at most ReadsPerClient at once
// per client address and Reads in all, each under a deadline that the
// driver sends as maxTimeMS where it can; a failed read is told apart as
// the client's leaving (debug, nothing answered), a slow database (503
// for that request) or an unreachable one (the outage, outage.go).
//
// Files: web.go (New, routes, rendering, errors), auth.go (token, CSRF,
// login, logout), session.go (the session store), limit.go (wrong tokens
// per address), readbounds.go (the reads' bounds, and what a failed read
// says), outage.go (the database unreachable), hosts.go (the Host check), guard.go (both checks for
// another handler of the process: the Disbatch web API, den/web/dci), overview.go (/), tasks.go
// (/tasks), task.go (/tasks/ID), output.go (reading output,
// /tasks/ID/output), actions.go (the POSTs), nodeinfo.go (node
// resources), format.go (template helpers).
package web
