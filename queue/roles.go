package queue

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The roles of the one Store, each declared once, as an interface of the
// methods its callers use (asynq's base.Broker is the model): a node
// holds a NodeStore, a task runner a RunnerStore, an operator's tool (den's
// command line, its web pages, the Disbatch web API, bulk edits) an
// OperatorStore, the archive's reader an ArchiveReader. A method two roles
// use is written once, on Store, and listed in both. No role lists more
// than 60 methods (docs/structure_test.go).

// NodeStore is what a node does to the database: claim, release and hand
// over tasks, write its node document, rescue what dead runners and nodes
// left, and keep the database in order (counts, dependencies, malformed
// and irregular documents, schedules, retention, stats, unique keys).
type NodeStore interface {
	// Claims and what a claim hands over.
	Claim(ctx context.Context, r ClaimRequest) (c Claimed, ok bool, err error)
	Probe(ctx context.Context, r ProbeRequest) (queueID bson.ObjectID, ok bool, err error)
	FailClaimed(ctx context.Context, m MalformedClaim, node string, now time.Time) (bool, error)
	Release(ctx context.Context, taskID bson.ObjectID, node string, now time.Time) (bool, error)
	ReleaseLost(ctx context.Context, queueIDs []bson.ObjectID, node string, claimedAt time.Time) (int64, error)
	ReleaseClaims(ctx context.Context, node string, now time.Time) (int64, error)
	WatchArrivals(ctx context.Context) (*Arrivals, error)

	// Queues and their counts.
	Queues(ctx context.Context) ([]Queue, []MalformedQueue, error)
	QueuesWithWork(ctx context.Context, r WorkRead) ([]Queue, error)
	QueuesByID(ctx context.Context, ids []bson.ObjectID) ([]Queue, error)
	QueuesWithPriority(ctx context.Context, queueIDs []bson.ObjectID) (map[bson.ObjectID]bool, error)
	QueueDoc(ctx context.Context, id bson.ObjectID) (*Queue, error)
	FillCounts(ctx context.Context, qs []Queue) (int64, error)
	RunningInQueue(ctx context.Context, queueID bson.ObjectID) (int64, error)
	RunningAll(ctx context.Context) (Running, error)
	DecrementTodo(ctx context.Context, queueID bson.ObjectID) error
	OldestReady(ctx context.Context, queueID bson.ObjectID, now time.Time) (time.Time, bool, error)

	// Node documents, leases and the shared configuration.
	WriteNodeDocument(ctx context.Context, node string, queues []NodeQueue, self *NodeSelf, now time.Time) (limit NodeLimit, problem string, err error)
	WriteNodeTimestamp(ctx context.Context, node string, now time.Time) error
	NodesSeenOffers(ctx context.Context) (map[string]time.Time, map[string]Resources, error)
	ClaimingNodes(ctx context.Context) ([]bson.RawValue, error)
	NodeTasks(ctx context.Context, node any) ([]Task, error)
	TakeLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (until time.Time, held bool, err error)
	ReleaseLease(ctx context.Context, name, holder string, now time.Time) error
	ActiveConfig(ctx context.Context) (SharedConfig, error)
	SyncClock(ctx context.Context, c *Clock) error

	// Tasks: rescue, cancellation, dependencies.
	Task(ctx context.Context, taskID bson.ObjectID) (*Task, error)
	Held(ctx context.Context, node string, cancelled bool) ([]Task, error)
	Rescue(ctx context.Context, task Task, q *Queue, why Outcome, leftovers int, now time.Time) (int, error)
	CancelQueued(ctx context.Context, now time.Time) (int64, error)
	CancelUnstarted(ctx context.Context, taskID bson.ObjectID, node string, now time.Time) (bool, error)
	CancelRunning(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, now time.Time) (bool, error)
	Statuses(ctx context.Context, ids []bson.ObjectID) (map[bson.ObjectID]int, error)
	BlockedTasks(ctx context.Context, queueIDs []bson.ObjectID, limit int64) ([]Blocked, error)
	MarkWaiting(ctx context.Context, b Blocked, waiting []bson.ObjectID) (bool, error)
	FailBlocked(ctx context.Context, b Blocked, reason string, now time.Time) (bool, error)
	MarkDependents(ctx context.Context, ids []bson.ObjectID) error
	SettleDependents(ctx context.Context, ended []EndedTask, now time.Time) (released int64, cancelled []bson.ObjectID, err error)
	CancelDependents(ctx context.Context, ids []bson.ObjectID, why string, now time.Time) ([]bson.ObjectID, error)

	// Malformed, irregular and unfit tasks.
	Malformed(ctx context.Context, queueIDs []bson.ObjectID) ([]MalformedTask, error)
	FailMalformed(ctx context.Context, m MalformedTask, node string, now time.Time) (bool, error)
	Irregular(ctx context.Context, queueIDs []bson.ObjectID, unfit *UnfitQuery) ([]Task, error)
	Normalize(ctx context.Context, t Task) (bool, error)
	FailQueued(ctx context.Context, t Task, node, reason string, now time.Time) (bool, error)
	SetUnfit(ctx context.Context, id bson.ObjectID, was, reason string) (bool, error)

	// Indexes, schedules, retention, stats and unique keys.
	EnsureIndexes(ctx context.Context) (IndexReport, error)
	FireDue(ctx context.Context, now time.Time) (Fired, error)
	RetirePage(ctx context.Context, f RetireFilter) (tasks []Task, read int, last bson.ObjectID, err error)
	RetireTasks(ctx context.Context, tasks []Task, mode RetireMode) (Retired, error)
	DeleteReports(ctx context.Context, tasks []bson.ObjectID) (int64, error)
	AddStats(ctx context.Context, qs []QueueStat, ns []NodeStat) error
	TrimStats(ctx context.Context, before time.Time, limit int64) (int64, error)
	EnsureUniqueKeys(ctx context.Context) error
	TakeOutOversized(ctx context.Context) (OversizedKeys, error)
	FreeEnded(ctx context.Context, queueID bson.ObjectID, key string, now time.Time) (int64, error)
	KeyHolder(ctx context.Context, queueID bson.ObjectID, key string) (*KeyHeldError, error)
}

// RunnerStore is what the runner of one task does to the database: start
// the task, keep its lease, publish its output and usage, finish or retry
// it and release what comes after it.
type RunnerStore interface {
	Start(ctx context.Context, taskID bson.ObjectID, node string, runner RunnerInfo, now time.Time) (task *Task, ok bool, err error)
	WriteBeat(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, now time.Time) (Lease, error)
	PublishLive(ctx context.Context, taskID bson.ObjectID, node string, live Live) (bool, error)
	SetUsage(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, u Usage) (bool, error)
	Finish(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, r Result, now time.Time) (bool, error)
	Retry(ctx context.Context, taskID bson.ObjectID, node string, token bson.ObjectID, entry HistoryEntry, startAfter, now time.Time) (bool, error)
	Offers(ctx context.Context, since time.Time) (map[string]Resources, error)
	Task(ctx context.Context, taskID bson.ObjectID) (*Task, error)
	QueueDoc(ctx context.Context, id bson.ObjectID) (*Queue, error)
	DecrementTodo(ctx context.Context, queueID bson.ObjectID) error
	SettleDependents(ctx context.Context, ended []EndedTask, now time.Time) (released int64, cancelled []bson.ObjectID, err error)
}

// OperatorStore is what operators do to the database, through den's
// command line, its web pages and the Disbatch web API: queues, tasks,
// schedules and node documents, read, changed, cancelled and retried.
type OperatorStore interface {
	// Queues.
	Queues(ctx context.Context) ([]Queue, []MalformedQueue, error)
	QueueDoc(ctx context.Context, id bson.ObjectID) (*Queue, error)
	FindQueue(ctx context.Context, ref string) (q Queue, problem, err error)
	CountQueues(ctx context.Context) (int64, error)
	CreateQueue(ctx context.Context, name, plugin string, maxThreads int, sort string) (bson.ObjectID, error)
	CreateQueueWith(ctx context.Context, settings QueueSettings) (bson.ObjectID, error)
	UpdateQueue(ctx context.Context, id bson.ObjectID, settings QueueSettings) error
	UpdateQueueResult(ctx context.Context, id bson.ObjectID, settings QueueSettings) (UpdateResult, error)
	DeleteQueue(ctx context.Context, id bson.ObjectID) error
	PauseQueue(ctx context.Context, id bson.ObjectID, by string, now time.Time) (PauseOutcome, error)
	ResumeQueue(ctx context.Context, id bson.ObjectID) (PauseOutcome, error)
	TaskCounts(ctx context.Context, only ...bson.ObjectID) (map[bson.ObjectID]StatusCounts, error)
	RunningAll(ctx context.Context) (Running, error)
	ReadCensus(ctx context.Context, only ...bson.ObjectID) (*Census, error)
	MakeCensus(ctx context.Context, by string, now func() time.Time) (*Census, error)
	CheckCounts(ctx context.Context) ([]CountDrift, error)
	FixCounts(ctx context.Context, d CountDrift) (bool, error)
	// The census's lease (CensusTaker): one census at a time.
	TakeLease(ctx context.Context, name, holder string, now time.Time, ttl time.Duration) (until time.Time, held bool, err error)
	ReleaseLease(ctx context.Context, name, holder string, now time.Time) error

	// Tasks: read, added, cancelled, retried, explained.
	Task(ctx context.Context, taskID bson.ObjectID) (*Task, error)
	TasksByID(ctx context.Context, ids []bson.ObjectID) ([]Task, error)
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
	CountTasks(ctx context.Context, f TaskFilter) (int64, error)
	LastEnded(ctx context.Context, queueID bson.ObjectID, n int64) ([]Task, error)
	Statuses(ctx context.Context, ids []bson.ObjectID) (map[bson.ObjectID]int, error)
	InsertTasks(ctx context.Context, queueID bson.ObjectID, params []bson.Raw, now time.Time, opts InsertOptions) ([]bson.ObjectID, error)
	MarkDependents(ctx context.Context, ids []bson.ObjectID) error
	SetCancel(ctx context.Context, id bson.ObjectID) (CancelOutcome, error)
	RetryCandidates(ctx context.Context, f TaskFilter) ([]Task, error)
	RetryEnded(ctx context.Context, t Task, now time.Time) (bool, error)
	SetLiveUntil(ctx context.Context, taskID bson.ObjectID, until time.Time) (bool, error)
	UnfitTasks(ctx context.Context, n int64) ([]Task, error)
	ReadFacts(ctx context.Context, now time.Time, deadAfter time.Duration) (*Facts, error)
	Why(ctx context.Context, f *Facts, t Task) ([]Reason, error)

	// Retiring ended tasks.
	RetireCandidates(ctx context.Context, f RetireFilter) ([]Task, error)
	RetireNewest(ctx context.Context, f RetireFilter) (bson.ObjectID, error)
	RetireCount(ctx context.Context, f RetireFilter) (int64, error)
	RetirePage(ctx context.Context, f RetireFilter) (tasks []Task, read int, last bson.ObjectID, err error)
	RetireTasks(ctx context.Context, tasks []Task, mode RetireMode) (Retired, error)
	ArchivedTask(ctx context.Context, id bson.ObjectID) (*Task, error)

	// Nodes.
	Nodes(ctx context.Context) ([]NodeDoc, error)
	NodeTasks(ctx context.Context, node any) ([]Task, error)
	SetNodeMaxThreads(ctx context.Context, node string, limit *int) error
	SetNodeLimit(ctx context.Context, id bson.ObjectID, name string, limit *int) (UpdateResult, error)
	QuietNode(ctx context.Context, name, by string, now time.Time) (PauseOutcome, error)
	ResumeNode(ctx context.Context, name string) (PauseOutcome, error)
	ForgetNode(ctx context.Context, name string, now time.Time, deadAfter time.Duration) (NodeDoc, error)

	// Schedules.
	AddSchedule(ctx context.Context, spec ScheduleSpec, now time.Time) (Schedule, error)
	Schedules(ctx context.Context) ([]Schedule, error)
	Schedule(ctx context.Context, name string) (*Schedule, error)
	PauseSchedule(ctx context.Context, name string, paused bool, now time.Time) (bool, error)
	DeleteSchedule(ctx context.Context, name string) (bool, error)
	RunScheduleNow(ctx context.Context, name string, now time.Time) (id bson.ObjectID, inserted bool, err error)

	// The Disbatch web API's reads, and stats.
	SearchTasks(ctx context.Context, filter, sort, projection bson.D, skip, limit int64) ([]bson.Raw, error)
	CountTasksMatching(ctx context.Context, filter bson.D) (int64, error)
	EachDocument(ctx context.Context, coll string, filter, projection bson.D, fn func(bson.Raw) error) error
	Stats(ctx context.Context, q StatsQuery) ([]StatPoint, error)
}

// ArchiveReader reads tasks_archive (NewArchive).
type ArchiveReader interface {
	Task(ctx context.Context, taskID bson.ObjectID) (*Task, error)
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
}

// Each role is the Store's.
var (
	_ NodeStore     = (*Store)(nil)
	_ RunnerStore   = (*Store)(nil)
	_ OperatorStore = (*Store)(nil)
	_ ArchiveReader = (*Store)(nil)
)
