package kafka

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

var (
	// ErrGenerationEnded is returned by Commit once the generation that
	// owned the partitions has ended (Revoked returned, Run returned, or
	// the coordinator moved the group on). The caller drops its
	// uncommitted state: the records are delivered again to whichever
	// member owns the partition next.
	ErrGenerationEnded = errors.New("consumer group generation ended")
	// ErrNotAssigned is returned by Commit for a partition this member
	// does not own in the current generation.
	ErrNotAssigned = errors.New("partition not assigned to this member")
	// ErrClosed is returned by Run after Close.
	ErrClosed = errors.New("kafka source closed")
)

const (
	// joinBackoff is the pause after a failed group join. Joining is cheap,
	// and a fresh broker's coordinator answers within a second or two.
	joinBackoff = time.Second
	// partitionWatch is how often the group looks for partitions added to
	// its topics; a new partition is consumed within this time.
	partitionWatch = 30 * time.Second
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Partition is a partition assigned to this member.
type Partition struct {
	Topic     string
	Partition int32
	// CommittedOffset is the group's committed offset (the next offset to
	// read), or -1 when the group has committed none and reading starts
	// at Config.StartOffset. In Assigned it is the offset delivery starts
	// from; in Revoked it is the last offset committed through Commit in
	// the generation (or the starting one if none was).
	CommittedOffset int64
}

// Message is one Kafka record, the run loop's own type: a partition
// reader's run of records reaches the loop as it was read, with no copy
// (a copy into a loop-side type cost CPU on every record). Key and Value are
// the handler's to keep.
type Message = pipeline.Message

// Handler receives a Source's assignments and messages. Run calls its
// methods from one goroutine, never concurrently, in this order for every
// generation: Assigned once, Message for each record (in offset order
// within a partition, partitions interleaved), Revoked once.
type Handler interface {
	// Assigned is called before any message of a generation with the
	// partitions this member now owns (possibly none), so that the caller
	// can rebuild its state. ctx is done when the generation ends. An
	// error stops Run (after Revoked).
	Assigned(ctx context.Context, parts []Partition) error
	// Message handles one record. It may block: while it does, no further
	// record is taken from the queue and the readers stop fetching once
	// the queue is full. ctx is done when the generation ends (a
	// rebalance) or Run's context is; a handler blocked on a slow sink
	// should return then: its uncommitted work is delivered again. A
	// non-nil error other than ctx's own stops Run (after Revoked).
	Message(ctx context.Context, m Message) error
	// Revoked is called once delivery of the generation has stopped,
	// also when Run returns. Commit still works until Revoked returns, so
	// the caller may flush and commit what it holds; after that it must
	// drop its uncommitted state. ctx is not cancelled by Run's context
	// but expires after the smaller of SessionTimeout and
	// RebalanceTimeout, by when the coordinator gives up on this member.
	Revoked(ctx context.Context, parts []Partition)
}

// BatchHandler is implemented by a Handler that takes the records of one
// partition a run at a time (up to a few hundred consecutive ones, as they
// were fetched): Run then calls Messages instead of Message, with the same
// ordering and the same error and context rules. The slice and its
// records, Key and Value bytes included, are the handler's to keep.
type BatchHandler interface {
	Handler
	Messages(ctx context.Context, ms []Message) error
}

// RetryReason names the kind of an error the source retries (the reason
// label of ncclwatch_source_retries_total): "corrupt_batch" when the
// broker reports a corrupt message (error 2, CORRUPT_MESSAGE), "fetch"
// for the rest.
func RetryReason(err error) string {
	if errors.Is(err, kafka.InvalidMessage) {
		return "corrupt_batch"
	}
	return "fetch"
}

// RetryObserver is implemented by a Handler that wants to hear of the
// errors Run retries by itself: a group join that failed, a broker that
// cannot be reached. Run calls Retrying from the same goroutine as the
// Handler methods; it must not block. Errors that retrying will not fix
// (bad credentials, missing ACLs, an unsupported protocol) end Run instead.
type RetryObserver interface {
	Retrying(err error)
}

// Source is one member of a Kafka consumer group. It delivers records to a
// Handler and commits offsets only when told to through Commit; it never
// commits on its own. Commit, Lag and Close are safe for concurrent use
// with Run.
type Source struct {
	cfg    Config
	dialer *kafka.Dialer
	start  int64 // kafka.FirstOffset or kafka.LastOffset

	mu      sync.Mutex
	gen     *generation // the current generation; nil between generations
	queue   chan chunk  // the current generation's queue; nil between them
	lag     map[TopicPartition]int64
	running bool
	closed  bool
	cancel  context.CancelFunc // stops the running Run
	done    chan struct{}      // closed when the running Run returns
	// queued counts the messages in queue (updated after a send and a
	// receive, so it may be off by a chunk for a moment).
	queued atomic.Int64
	// throttled counts the fetch responses that asked for a pause, and
	// throttleNanos their pauses (Stats).
	throttled     atomic.Int64
	throttleNanos atomic.Int64
}

// Stats are a Source's fetch counters since NewSource.
type Stats struct {
	// ThrottledFetches counts the fetch responses whose broker asked for a
	// pause (a quota's throttle_time_ms) that the partition reader kept
	// before its next fetch; ThrottleTime is those pauses' sum.
	ThrottledFetches int64
	ThrottleTime     time.Duration
}

// generation is one assignment of partitions to this member.
type generation struct {
	kg    *kafka.Generation
	owned map[TopicPartition]struct{} // fixed for the generation

	// mu is held for reading by each Commit in flight and for writing to
	// end the generation, so that ending waits for those commits and no
	// commit starts after it.
	mu    sync.RWMutex
	ended bool

	cmu       sync.Mutex
	committed map[TopicPartition]int64 // last committed offset, -1 for none
}

// NewSource checks cfg and loads its TLS files. It does not connect: Run
// does.
func NewSource(cfg Config) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sec, err := newSecurity("kafka", cfg.TLS, cfg.SASL)
	if err != nil {
		return nil, err
	}
	s := &Source{
		cfg:    cfg,
		dialer: sec.dialer(),
		start:  kafka.FirstOffset,
		lag:    make(map[TopicPartition]int64),
	}
	if cfg.StartOffset == StartLatest {
		s.start = kafka.LastOffset
	}
	return s, nil
}

// Run joins the group and consumes until ctx is done or Close is called,
// then leaves the group and returns nil. It returns early with an error
// when a handler method fails or Kafka reports an error that retrying will
// not fix. Every goroutine it starts has exited when it returns. Run may
// be called again after it returned, but not concurrently.
func (s *Source) Run(ctx context.Context, h Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.running:
		s.mu.Unlock()
		return errors.New("kafka source: Run is already running")
	}
	done := make(chan struct{})
	s.running, s.cancel, s.done = true, cancel, done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running, s.cancel, s.done = false, nil, nil
		s.mu.Unlock()
		close(done)
	}()

	if err := s.checkTopics(ctx); err != nil {
		return err
	}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                     s.cfg.GroupID,
		Brokers:                s.cfg.Brokers,
		Dialer:                 s.dialer,
		Topics:                 s.cfg.Topics,
		HeartbeatInterval:      s.cfg.HeartbeatInterval,
		SessionTimeout:         s.cfg.SessionTimeout,
		RebalanceTimeout:       s.cfg.RebalanceTimeout,
		JoinGroupBackoff:       joinBackoff,
		WatchPartitionChanges:  true,
		PartitionWatchInterval: partitionWatch,
		StartOffset:            s.start,
	})
	if err != nil {
		return fmt.Errorf("kafka consumer group: %w", err)
	}
	defer cg.Close()
	obs, _ := h.(RetryObserver)
	for {
		kg, err := cg.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			err = fmt.Errorf("kafka join group %q: %w", s.cfg.GroupID, err)
			if permanent(err) {
				return err
			}
			// A join that meets a rebalance in progress is the normal
			// course of a rebalance, not worth a report.
			if obs != nil && !errors.Is(err, kafka.RebalanceInProgress) {
				obs.Retrying(err)
			}
			continue
		}
		if stop, err := s.consume(ctx, cg, kg, h, obs); stop {
			return err
		}
	}
}

// consume runs one generation: Assigned, delivery, Revoked. It reports
// whether Run must return, and with what error. When it must, it has
// closed the group.
func (s *Source) consume(ctx context.Context, cg *kafka.ConsumerGroup, kg *kafka.Generation, h Handler, obs RetryObserver) (stop bool, err error) {
	g := &generation{kg: kg, owned: make(map[TopicPartition]struct{}), committed: make(map[TopicPartition]int64)}
	var parts []Partition
	for topic, as := range kg.Assignments {
		for _, a := range as {
			off := a.Offset
			if off < 0 { // kafka.FirstOffset or LastOffset: nothing committed
				off = -1
			}
			parts = append(parts, Partition{Topic: topic, Partition: int32(a.ID), CommittedOffset: off})
			tp := TopicPartition{topic, int32(a.ID)}
			g.owned[tp] = struct{}{}
			g.committed[tp] = off
		}
	}
	slices.SortFunc(parts, func(a, b Partition) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})

	gctx, cancelGen := context.WithCancel(ctx)
	defer cancelGen()
	// The holder keeps the kafka-go generation (and its coordinator
	// connection) open until Revoked has returned: kafka-go rejoins the
	// group as soon as every function started on the generation returns,
	// and the coordinator still accepts commits of the old generation
	// while it waits for members to rejoin.
	ended := make(chan struct{})   // kafka-go ended the generation
	release := make(chan struct{}) // Revoked returned: let it go
	kg.Start(func(kctx context.Context) {
		<-kctx.Done()
		close(ended)
		cancelGen()
		<-release
	})
	s.mu.Lock()
	s.gen = g
	s.mu.Unlock()

	var (
		readers sync.WaitGroup
		fatal   = make(chan error, len(parts))
		warn    = make(chan error, len(parts))
	)
	err = h.Assigned(gctx, slices.Clone(parts))
	if err != nil {
		if gctx.Err() != nil && isContextErr(err) {
			err = nil // the generation ended under it
		} else {
			err = fmt.Errorf("kafka assigned: %w", err)
		}
	} else {
		// The queue's bound is QueueCapacity messages: chunks of size
		// messages, capacity/size of them.
		size := min(chunkMax, s.cfg.QueueCapacity)
		q := make(chan chunk, max(s.cfg.QueueCapacity/size, 1))
		s.queued.Store(0)
		s.mu.Lock()
		s.queue = q
		s.mu.Unlock()
		for _, p := range parts {
			readers.Add(1)
			f := &fetcher{s: s, p: p, q: q, fatal: fatal, warn: warn, size: size}
			go func() {
				defer readers.Done()
				f.run(gctx)
			}()
		}
		err = s.deliver(gctx, q, fatal, warn, h, obs)
	}
	cancelGen()

	rctx, cancelRevoke := context.WithTimeout(context.WithoutCancel(ctx), min(s.cfg.SessionTimeout, s.cfg.RebalanceTimeout))
	h.Revoked(rctx, g.revoked(parts))
	cancelRevoke()
	s.end(g)
	readers.Wait()

	stop = ctx.Err() != nil || err != nil
	if stop {
		// Close the group before letting the generation go, so that
		// kafka-go leaves the group instead of joining the next
		// generation; closing ends the generation, which the holder
		// waits for.
		closed := make(chan struct{})
		go func() {
			cg.Close()
			close(closed)
		}()
		<-ended
		close(release)
		<-closed
		return true, err
	}
	<-ended // delivery stops only when gctx is done: here, by the holder
	close(release)
	return false, nil
}

// deliver passes queued messages to the handler until the generation ends
// or something fails.
func (s *Source) deliver(ctx context.Context, q <-chan chunk, fatal, warn <-chan error, h Handler, obs RetryObserver) error {
	bh, _ := h.(BatchHandler)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-fatal:
			return err
		case err := <-warn:
			if obs != nil {
				obs.Retrying(err)
			}
		case c := <-q:
			s.queued.Add(-int64(len(c.msgs)))
			// select picks at random among ready cases; a generation that
			// ended must not deliver one more message.
			if ctx.Err() != nil {
				return nil
			}
			s.observe(c.msgs[len(c.msgs)-1])
			if bh != nil {
				if err := bh.Messages(ctx, c.msgs); err != nil {
					return deliveryError(ctx, c.msgs[0], err)
				}
				continue
			}
			for _, m := range c.msgs {
				if err := h.Message(ctx, m); err != nil {
					return deliveryError(ctx, m, err)
				}
				if ctx.Err() != nil {
					return nil
				}
			}
		}
	}
}

// deliveryError is Run's error for a handler that failed on m (or on the
// run of messages starting with m): nil when the generation ended under
// it.
func deliveryError(ctx context.Context, m Message, err error) error {
	if ctx.Err() != nil && isContextErr(err) {
		return nil
	}
	return fmt.Errorf("kafka message %s/%d@%d: %w", m.Topic, m.Partition, m.Offset, err)
}

// checkTopics fails with a permanent error when a broker says that one of
// the configured topics does not exist: a consumer group on a missing topic
// would wait forever for an assignment. A broker that cannot be reached is
// left to the group's own retries.
func (s *Source) checkTopics(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var conn *kafka.Conn
	for _, b := range s.cfg.Brokers {
		c, err := s.dialer.DialContext(cctx, "tcp", b)
		if err == nil {
			conn = c
			break
		}
	}
	if conn == nil {
		return nil
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	for _, topic := range s.cfg.Topics {
		_, err := conn.ReadPartitions(topic)
		if errors.Is(err, kafka.UnknownTopicOrPartition) {
			return pipeline.Permanent(fmt.Errorf("kafka topic %q does not exist on %v: create it (ncclwatch replay creates its topic) or fix kafka.topics / --topic", topic, s.cfg.Brokers))
		}
		if err != nil {
			var ke kafka.Error
			if errors.As(err, &ke) && permanent(err) {
				return pipeline.Permanent(fmt.Errorf("kafka metadata of %q: %w", topic, err))
			}
		}
	}
	return nil
}

// observe records the lag after m is delivered.
func (s *Source) observe(m Message) {
	s.mu.Lock()
	s.lag[TopicPartition{m.Topic, m.Partition}] = max(m.HighWaterMark-(m.Offset+1), 0)
	s.mu.Unlock()
}

// revoked returns parts with the offsets committed in the generation.
func (g *generation) revoked(parts []Partition) []Partition {
	g.cmu.Lock()
	defer g.cmu.Unlock()
	out := slices.Clone(parts)
	for i := range out {
		out[i].CommittedOffset = g.committed[TopicPartition{out[i].Topic, out[i].Partition}]
	}
	return out
}

// end makes Commit fail for g from now on, after commits in flight.
func (s *Source) end(g *generation) {
	g.mu.Lock()
	g.ended = true
	g.mu.Unlock()
	s.mu.Lock()
	if s.gen == g {
		s.gen, s.queue = nil, nil
	}
	for tp := range g.owned {
		delete(s.lag, tp)
	}
	s.mu.Unlock()
}

// Commit commits offsets for partitions of the current generation; for a
// partition named more than once the highest offset wins. It returns an
// error wrapping ErrGenerationEnded when there is no current generation or
// the coordinator no longer accepts this one, and one wrapping
// ErrNotAssigned for a partition this member does not own; nothing is
// committed then. A commit is bounded by the coordinator timeout (5 s);
// ctx is checked before it is sent. Commit may be called from a Handler
// method, Revoked included, and from other goroutines.
func (s *Source) Commit(ctx context.Context, offs []pipeline.Offset) error {
	if len(offs) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("kafka commit: %w", err)
	}
	s.mu.Lock()
	g := s.gen
	s.mu.Unlock()
	if g == nil {
		return fmt.Errorf("kafka commit: %w", ErrGenerationEnded)
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.ended {
		return fmt.Errorf("kafka commit: %w", ErrGenerationEnded)
	}
	req := make(map[string]map[int]int64)
	for _, o := range offs {
		if _, ok := g.owned[TopicPartition{o.Topic, o.Partition}]; !ok {
			return fmt.Errorf("kafka commit %s/%d: %w", o.Topic, o.Partition, ErrNotAssigned)
		}
		if o.Next < 0 {
			return fmt.Errorf("kafka commit %s/%d: offset %d is negative", o.Topic, o.Partition, o.Next)
		}
		ps := req[o.Topic]
		if ps == nil {
			ps = make(map[int]int64)
			req[o.Topic] = ps
		}
		if cur, ok := ps[int(o.Partition)]; !ok || o.Next > cur {
			ps[int(o.Partition)] = o.Next
		}
	}
	if err := g.kg.CommitOffsets(req); err != nil {
		if generationGone(err) {
			return fmt.Errorf("kafka commit: %w: %w", ErrGenerationEnded, err)
		}
		return fmt.Errorf("kafka commit: %w", err)
	}
	g.cmu.Lock()
	for topic, ps := range req {
		for p, off := range ps {
			g.committed[TopicPartition{topic, int32(p)}] = off
		}
	}
	g.cmu.Unlock()
	return nil
}

// Lag returns the consumer lag of each partition that has delivered a
// message in the current generation: its high water mark minus the next
// offset to deliver, as of the last delivered message. Partitions that
// delivered nothing yet are absent.
func (s *Source) Lag() map[TopicPartition]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[TopicPartition]int64, len(s.lag))
	for tp, l := range s.lag {
		out[tp] = l
	}
	return out
}

// QueueLen returns the number of fetched messages waiting for the handler
// and the queue's capacity, for the metrics.
func (s *Source) QueueLen() (length, capacity int) {
	return int(max(s.queued.Load(), 0)), s.cfg.QueueCapacity
}

// Stats returns the source's fetch counters since NewSource.
func (s *Source) Stats() Stats {
	return Stats{ThrottledFetches: s.throttled.Load(), ThrottleTime: time.Duration(s.throttleNanos.Load())}
}

// Close stops a running Run and waits for it to return (Revoked is called,
// the group is left); later Runs return ErrClosed. It must not be called
// from a Handler method.
func (s *Source) Close() error {
	s.mu.Lock()
	s.closed = true
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// permanent reports whether err will not go away by retrying: bad
// credentials, missing ACLs, an unsupported protocol, a broker certificate
// that does not verify. The operator has to change something.
func permanent(err error) bool {
	var ke kafka.Error
	if errors.As(err, &ke) {
		switch ke {
		case kafka.TopicAuthorizationFailed, kafka.GroupAuthorizationFailed, kafka.ClusterAuthorizationFailed,
			kafka.SASLAuthenticationFailed, kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState,
			kafka.InvalidSessionTimeout, kafka.InconsistentGroupProtocol, kafka.InvalidGroupId,
			kafka.UnsupportedVersion:
			return true
		}
		return false
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		verify    *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &verify)
}

// generationGone reports whether the coordinator refused a commit because
// the generation is over.
func generationGone(err error) bool {
	return errors.Is(err, kafka.IllegalGeneration) || errors.Is(err, kafka.UnknownMemberId) ||
		errors.Is(err, kafka.RebalanceInProgress) || errors.Is(err, kafka.FencedInstanceID)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// ErrLoopStopped is returned by the handler of Emit once the run loop has
// returned: nothing takes the records any more.
var ErrLoopStopped = errors.New("run loop stopped")

// Emit runs the source (see Run) as the run loop's source: its
// assignments, records and revocations go to out, in order, as
// pipeline.Inputs, and Emit closes out when it returns. Records travel in
// runs of one partition as they were fetched (Input.Messages, up to a few
// hundred each), so out needs little capacity of its own: the source
// already queues Config.QueueCapacity records. An assignment and a
// revocation wait for the loop's answer (a revocation at most until its
// deadline); stopped is the loop's Stopped channel, after which Emit stops
// sending and returns. retrying, if set, hears of errors the source retries
// by itself (see RetryObserver).
func (s *Source) Emit(ctx context.Context, out chan<- pipeline.Input, stopped <-chan struct{}, retrying func(error)) error {
	defer close(out)
	return s.Run(ctx, &emitter{out: out, stopped: stopped, retrying: retrying})
}

// emitter is the Handler of Emit.
type emitter struct {
	out      chan<- pipeline.Input
	stopped  <-chan struct{}
	retrying func(error)
}

func toPipeline(parts []Partition) []pipeline.Partition {
	out := make([]pipeline.Partition, len(parts))
	for i, p := range parts {
		out[i] = pipeline.Partition{Topic: p.Topic, Partition: p.Partition, Committed: p.CommittedOffset}
	}
	return out
}

// ask sends a control input and waits for the loop's answer, or for
// limit to end.
func (e *emitter) ask(kind pipeline.InputKind, ctx context.Context, parts []Partition, limit <-chan struct{}) error {
	done := make(chan error, 1)
	in := pipeline.Input{Kind: kind, Partitions: toPipeline(parts), Ctx: ctx, Done: done}
	select {
	case e.out <- in:
	case <-e.stopped:
		return ErrLoopStopped
	case <-limit:
		return context.Cause(ctx)
	}
	select {
	case err := <-done:
		return err
	case <-e.stopped:
		return ErrLoopStopped
	case <-limit:
		return context.Cause(ctx)
	}
}

func (e *emitter) Assigned(ctx context.Context, parts []Partition) error {
	// The rebuild honours ctx by itself; the answer always comes.
	return e.ask(pipeline.InputAssigned, ctx, parts, nil)
}

func (e *emitter) Message(ctx context.Context, m Message) error {
	in := pipeline.Input{Kind: pipeline.InputMessage, Message: m}
	select {
	case e.out <- in:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopped:
		return ErrLoopStopped
	}
}

// Messages hands the loop ms itself (a partition reader makes a fresh
// slice for every run it queues).
func (e *emitter) Messages(ctx context.Context, ms []Message) error {
	select {
	case e.out <- pipeline.Input{Kind: pipeline.InputMessage, Messages: ms}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.stopped:
		return ErrLoopStopped
	}
}

func (e *emitter) Revoked(ctx context.Context, parts []Partition) {
	// The loop stores what it can before ctx's deadline and drops the
	// rest; waiting past the deadline would only delay the rebalance.
	_ = e.ask(pipeline.InputRevoked, ctx, parts, ctx.Done())
}

func (e *emitter) Retrying(err error) {
	if e.retrying != nil {
		e.retrying(err)
	}
}
