package queue

import "context"

// ClaimsByCandidates reports whether s claims fifo and lifo queues by
// candidates (the server is FerretDB).
func ClaimsByCandidates(ctx context.Context, s *Store) (bool, error) {
	return s.claimsByCandidates(ctx)
}

// CandidateBatch is how many candidates one read lists.
const CandidateBatch = candidateBatch

// ClaimProtocol makes s claim with the protocol's own sorted claim, and
// ask every status at once, whatever the server (BenchmarkEngines).
func ClaimProtocol(s *Store) { s.server.Store(serverMongoDB) }
