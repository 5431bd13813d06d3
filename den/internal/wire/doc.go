// Package wire reads MongoDB's wire protocol just as far as den's
// development and test proxies need (den/devdb's, which serializes and
// counts commands; den/dentest's, which injects faults): whole messages,
// their opcode and moreToCome flag, and the command a request names. The
// relay (den/internal/relay) parses and validates messages fully, on its
// own terms.
package wire
