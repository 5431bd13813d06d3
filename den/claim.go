package den

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/queue"
)

func queueIDs(qs []queue.Queue) []bson.ObjectID {
	ids := make([]bson.ObjectID, len(qs))
	for i, q := range qs {
		ids[i] = q.ID
	}
	return ids
}

// free is how many more tasks of q this node may start now: the queue's
// limit (per node for maxthreads, across nodes for threads) minus what runs.
func (n *Node) free(q queue.Queue, running queue.Running) int {
	if q.Global {
		return q.MaxThreads - running.Queue(q.ID)
	}
	return q.MaxThreads - running.Node(q.ID, n.cfg.Name)
}

// claim claims tasks queue by queue until each queue's limit or the node's
// limit (nil: none) is reached, and hands each to a runner. Which queue goes
// first rotates from pass to pass, so that under a node limit no queue
// starves the others.
func (n *Node) claim(ctx context.Context, queues []queue.Queue, running queue.Running, limit *int, gfs string) error {
	nodeRunning := running.NodeTotal(n.cfg.Name)
	if len(queues) == 0 {
		return nil
	}
	n.offset = (n.offset + 1) % len(queues)
	for i := range queues {
		q := queues[(n.offset+i)%len(queues)]
		free := n.free(q, running)
		for free > 0 && (limit == nil || nodeRunning < *limit) {
			if ctx.Err() != nil {
				return nil
			}
			id, ok, err := n.claimOne(ctx, q)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if q.Global {
				over, err := n.overQueueLimit(ctx, q)
				if err != nil || over {
					n.release(id, "queue-wide threads limit reached by other nodes")
					if err != nil {
						return err
					}
					break
				}
			}
			free--
			nodeRunning++
			if n.cfg.BeforeHandOver != nil {
				n.cfg.BeforeHandOver(id)
			}
			if ctx.Err() != nil {
				// Shutting down between claim and hand-over: put it back.
				n.release(id, "node stopping")
				return nil
			}
			mode := gfs
			if q.GFS != "" {
				mode = q.GFS
			}
			if err := n.spawn(q, id, mode); err != nil {
				n.log.Error("cannot start a task runner; putting the task back", zap.String("task_id", id.Hex()), zap.Error(err))
				n.release(id, "runner did not start")
				return nil
			}
		}
	}
	return nil
}

// overQueueLimit checks, after a claim and before its hand-over, that the
// queue-wide limit (threads) still holds with it. Nodes count and then claim,
// so two nodes can both claim the last slot; but the later of two checks
// sees both claims, so at least one of them gives its claim back and the
// limit holds among den nodes.
func (n *Node) overQueueLimit(ctx context.Context, q queue.Queue) (bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	count, err := n.store.RunningInQueue(cctx, q.ID)
	return count > int64(q.MaxThreads), err
}

// claimOne makes one claim. The claim is not cancelled by shutdown: a claim
// interrupted half way could leave a task claimed that nobody knows about.
// If the claim's reply is lost, the claim may still have landed: the task
// is then put back, recognised by the claim's own mtime.
func (n *Node) claimOne(ctx context.Context, q queue.Queue) (bson.ObjectID, bool, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	at := n.now().Truncate(time.Millisecond)
	id, ok, err := n.store.Claim(cctx, q, n.cfg.Name, at)
	if err != nil {
		if released, rerr := n.store.ReleaseLost(cctx, q, n.cfg.Name, at); rerr == nil && released > 0 {
			n.log.Warn("a claim failed after it landed; task put back", zap.Error(err))
		}
	}
	return id, ok, err
}

// release puts a claimed task back in its queue.
func (n *Node) release(id bson.ObjectID, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := n.store.Release(ctx, id, n.cfg.Name, n.now())
	switch {
	case err != nil:
		n.log.Error("cannot put a claimed task back; it will be reaped as orphaned", zap.String("task_id", id.Hex()), zap.String("why", why), zap.Error(err))
	case ok:
		n.log.Info("claimed task put back in its queue", zap.String("task_id", id.Hex()), zap.String("why", why))
	}
}
