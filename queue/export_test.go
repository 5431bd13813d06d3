package queue

import (
	"context"
	"time"
)

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

// ReleaseReady queues (-2) every registered blocked task that waits for
// nothing (what SettleDependents does after a success).
func ReleaseReady(ctx context.Context, s *Store, now time.Time) (int64, error) {
	return s.releaseReady(ctx, now)
}
