// Package dci is Disbatch's web API, as the Perl Disbatch Command
// Interface (Disbatch::Web, Disbatch 4.0) answers it, served by den web on
// an address of its own (--dci-listen, web.dci_listen), so that
// Disbatch's own client (bin/disbatch) and scripts written for the Perl
// DCI work against den with only their host and port changed.
//
// Every route of Disbatch::Web 4.000 is here, with its parameters (a form,
// a JSON body or the query string, as parse_params reads them), its JSON
// (ObjectIds as {"$oid": HEX}, dates as its routes write them, and the
// MongoDB::InsertManyResult, UpdateResult and DeleteResult wrappers its
// client reads), status codes and error bodies. Where the Perl DCI is
// plainly wrong (it answers a failed update with a stringified Perl
// object, dies on a body that is not an object), den answers what it
// meant; docs/compatibility.md lists every route and each difference.
//
// Reads need nothing, as den web's pages. Writes need den web's token,
// as the basic-auth password in the realm "disbatch" (any user name: what
// bin/disbatch --username --password sends) or in an Authorization:
// Bearer header; without it, 401 with WWW-Authenticate. The Host check,
// the limit on wrong tokens (shared with den web's page) and cross-site
// refusal are den web's (den/web.Guard); bodies are bounded (MaxReadBody,
// MaxBody, MaxTasksBody), and every read is (bounds.go): its JSON's depth
// and size, the reads at once per client address and in all, its time,
// the tasks it returns.
//
// Everything goes through queue.OperatorStore: queues are created, changed and
// deleted with the command line's methods (checked as den queue create
// and set check them), tasks inserted in batches with den task add's
// (counts raised by exactly what landed), with the few queries of their
// own in queue/dci.go.
//
// Files: dci.go (New, routes, credentials), bounds.go (the reads'
// bounds, and the answers to a failed read), params.go (request
// parameters), json.go (the Perl DCI's JSON), nodes.go (/nodes,
// /plugins), queues.go (/queues), tasks.go (/tasks/:queue and
// /tasks/:queue/:collection), search.go (/tasks/search), old.go (the
// older routes).
package dci
