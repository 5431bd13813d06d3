package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Claims by candidates, on a server that cannot use an index for a sorted
// claim.
//
// The protocol's claim is one findOneAndUpdate sorted on _id. MongoDB
// answers it from the {node, status, queue, _id} index, reading one task.
// FerretDB (the development server) sorts in its own memory after decoding
// every queued task of the queue, so each claim costs as much as the queue
// is long: 10,000 tasks queued at once took hours to drain. On such a
// server a fifo or lifo claim is made in two steps, each a query the server
// answers from its indexes:
//
//  1. a find with the claim's filter and sort, limited to candidateBatch
//     tasks and projected to their _id: the oldest (fifo) or newest (lifo)
//     claimable tasks, read once for many claims;
//  2. for each claim, findOneAndUpdate with the claim's whole filter and the
//     next candidate's _id, unsorted: still one atomic update, which takes
//     the task only if it is still claimable, whoever else claims (a Perl
//     node with the protocol's own claim included). A candidate taken or
//     cancelled meanwhile is skipped.
//
// So fifo stays fifo, within what the list was when read: a task that
// becomes claimable after the list was read (a start_after reached, a
// dependency done) though older than the listed ones waits until the list
// is used up or older than candidateMaxAge. A queue of the default sort
// needs neither: the server's order is any order, and FerretDB stops at
// the first task that matches.
//
// MongoDB always gets the protocol's claim (ServerKind).

// candidateBatch is how many candidates one read lists.
const candidateBatch = 500

// candidateMaxAge is how long a list of candidates is used before it is
// read again.
const candidateMaxAge = 15 * time.Second

// candidateList is the candidates of one group of queues, oldest claim
// first.
type candidateList struct {
	ids  []bson.RawValue
	read time.Time
}

// candidates holds the lists of a store, by group of queues and sort.
type candidates struct {
	mu    sync.Mutex
	lists map[string]*candidateList
}

func candidateKey(r ClaimRequest) string {
	var b strings.Builder
	b.WriteString(r.Sort)
	for _, q := range r.Queues {
		b.WriteByte(':')
		b.WriteString(q.Hex())
	}
	return b.String()
}

// next takes the next candidate of r's group, reading the list first when
// it is used up or too old. ok is false when the group has no claimable
// task; fresh says the list was read by this call, and last that the
// candidate was the list's last.
func (c *candidates) next(ctx context.Context, s *Store, r ClaimRequest) (id bson.RawValue, fresh, last, ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := candidateKey(r)
	l := c.lists[key]
	if l == nil || len(l.ids) == 0 || r.At.Sub(l.read) > candidateMaxAge || r.At.Before(l.read) {
		ids, err := s.readCandidates(ctx, r)
		if err != nil {
			return id, false, false, false, err
		}
		if c.lists == nil {
			c.lists = map[string]*candidateList{}
		}
		l = &candidateList{ids: ids, read: r.At}
		c.lists[key] = l
		fresh = true
	}
	if len(l.ids) == 0 {
		delete(c.lists, key)
		return id, fresh, true, false, nil
	}
	id, l.ids = l.ids[0], l.ids[1:]
	return id, fresh, len(l.ids) == 0, true, nil
}

// forgetCandidates drops the lists of candidates when this store has made n
// tasks claimable again (released, or their dependencies done): they may
// come before the listed ones.
func (s *Store) forgetCandidates(n int64) {
	if n > 0 {
		s.candidates.forget()
	}
}

// forget drops every list.
func (c *candidates) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lists = nil
}

// readCandidates lists the _ids of the first candidateBatch claimable tasks
// of r's queues in claim order, whatever their type (a document whose _id
// is not an ObjectId is claimed like any, then failed as malformed).
func (s *Store) readCandidates(ctx context.Context, r ClaimRequest) ([]bson.RawValue, error) {
	cur, err := s.tasks.Find(ctx, ClaimFilter(r.At, r.Free, r.Queues...), options.Find().
		SetSort(ClaimSort(r.Sort)).
		SetLimit(candidateBatch).
		SetBatchSize(candidateBatch).
		SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, fmt.Errorf("list claimable tasks in %d queue(s) starting with %s: %w", len(r.Queues), r.Queues[0].Hex(), err)
	}
	defer cur.Close(ctx)
	var ids []bson.RawValue
	for cur.Next(ctx) {
		v := cur.Current.Lookup("_id")
		ids = append(ids, bson.RawValue{Type: v.Type, Value: append([]byte(nil), v.Value...)})
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("list claimable tasks in %d queue(s) starting with %s: %w", len(r.Queues), r.Queues[0].Hex(), err)
	}
	return ids, nil
}

// claimCandidate claims one task of r by candidates: the next candidate
// that is still claimable. claim runs the claim's findOneAndUpdate with a
// filter, sorted or not. When two lists read by this call are used up
// without a claim (others took them all, or a document's _id is of a kind
// an equality does not find again), the protocol's own sorted claim
// decides.
func (s *Store) claimCandidate(ctx context.Context, r ClaimRequest, claim func(filter bson.D, sorted bool) (bson.Raw, error)) (bson.Raw, error) {
	reads := 0
	for {
		id, fresh, last, ok, err := s.candidates.next(ctx, s, r)
		if fresh {
			reads++
		}
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, mongo.ErrNoDocuments
		}
		filter := append(ClaimFilter(r.At, r.Free, r.Queues...), bson.E{Key: "_id", Value: bson.D{{Key: "$eq", Value: id}}})
		raw, err := claim(filter, false)
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return raw, err
		}
		// Taken, cancelled or changed since the list was read.
		if last && reads >= 2 {
			return claim(ClaimFilter(r.At, r.Free, r.Queues...), true)
		}
	}
}
