package rules

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Stage is the rules tap of the pipeline, a pipeline.Consumer in front of
// the sink: for every batch it observes the batch's job summaries,
// evaluates the rules, and passes the batch on with the alert state changes
// added (Batch.Alerts), so that they are stored in the same insert as the
// summaries that caused them and committed with them. Only after the sink
// accepted the batch are the changes handed to the notifiers. The stage
// is pipeline.Scheduled: rules about absence and time progress between
// batches because the run loop hands it an empty batch when none came for
// the interval; the loop stores what that evaluation changed like every
// other batch, so the loop is the chain's one writer. Run runs the
// notifiers.
//
// Ownership: Consume does not keep or mutate b; it passes the sink a
// shallow copy whose Alerts it owns. Calls of Consume serialise on one
// mutex, so the sink never sees concurrent calls. Consume blocks as long
// as the sink does.
type Stage struct {
	eng       *Engine
	next      pipeline.Consumer
	notifiers []*Notifier
	interval  time.Duration
	now       func() time.Time
	log       zerolog.Logger
	m         *Metrics

	mu       sync.Mutex
	unstored []pipeline.Alert // changes the sink has not accepted yet
}

// maxUnstored bounds the changes held while the sink refuses them; beyond
// it the oldest are dropped (and counted). The sink being down blocks the
// pipeline too, so only the retries of a batch add to it.
const maxUnstored = 10000

// StageDeps are the stage's collaborators.
type StageDeps struct {
	// Notifiers get the changes after they were stored; Run runs them.
	Notifiers []*Notifier
	Logger    zerolog.Logger
	Metrics   *Metrics
	// Now is the clock of the evaluations (time.Now when nil): the one
	// place the rules read it.
	Now func() time.Time
}

// NewStage returns the rules tap in front of next. interval is its
// schedule (Every; Config.Interval).
func NewStage(eng *Engine, next pipeline.Consumer, interval time.Duration, deps StageDeps) *Stage {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	return &Stage{eng: eng, next: next, notifiers: deps.Notifiers, interval: interval, now: deps.Now,
		log: deps.Logger, m: deps.Metrics}
}

// Engine returns the stage's engine.
func (s *Stage) Engine() *Engine { return s.eng }

// Every is the stage's schedule (pipeline.Scheduled): the run loop hands
// it an empty batch when none came for this long.
func (s *Stage) Every() time.Duration { return s.interval }

// Consume observes b's summaries, evaluates, and passes b on to the sink
// with the alert changes (and any not yet stored) in Alerts. An empty
// batch (the loop's schedule) without changes is not passed on. When the
// sink fails the changes are kept for the caller's retry.
func (s *Stage) Consume(ctx context.Context, b *pipeline.Batch) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eng.ObserveBatch(b)
	s.evalLocked()
	if len(s.unstored) == 0 {
		if b.Empty() {
			return nil // nothing to store
		}
		return s.next.Consume(ctx, b)
	}
	nb := *b
	nb.Alerts = append(b.Alerts[:len(b.Alerts):len(b.Alerts)], s.unstored...)
	if err := s.next.Consume(ctx, &nb); err != nil {
		return err
	}
	s.storedLocked()
	return nil
}

// evalLocked evaluates now and queues the changes for storage.
func (s *Stage) evalLocked() {
	changes, err := s.eng.Eval(s.now())
	if err != nil {
		s.log.Warn().Err(err).Msg("rule evaluation failed; the alert states of the failing rules are unchanged")
	}
	s.unstored = append(s.unstored, changes...)
	if over := len(s.unstored) - maxUnstored; over > 0 {
		s.unstored = append(s.unstored[:0], s.unstored[over:]...)
		if s.m != nil {
			s.m.UnstoredDrops.Add(float64(over))
		}
	}
	if s.m != nil {
		s.m.Unstored.Set(float64(len(s.unstored)))
	}
}

// storedLocked hands the stored changes to the notifiers.
func (s *Stage) storedLocked() {
	for _, n := range s.notifiers {
		n.Notify(s.unstored)
	}
	s.unstored = s.unstored[:0:0]
	if s.m != nil {
		s.m.Unstored.Set(0)
	}
}

// Run runs the notifiers until ctx is done, and returns when they have
// stopped.
func (s *Stage) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, n := range s.notifiers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.Run(ctx)
		}()
	}
	wg.Wait()
	return nil
}

// Setup is the whole of the rules' wiring for `ncclwatch run`: it loads
// cfg.Files, builds the engine, the notifiers and the stage in front of
// next. Run the stage's Run (the notifiers) in the service's group and
// make it the run loop's sink (its schedule, pipeline.Scheduled); the
// stage sees the stream through the batches it consumes
// (Engine.ObserveBatch), with the runner's RunnerDeps.Observe on.
func Setup(cfg ServiceConfig, next pipeline.Consumer, deps SetupDeps) (*Stage, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rs, err := Load(cfg.Files...)
	if err != nil {
		return nil, err
	}
	eng, err := NewEngine(cfg.Engine, rs, EngineDeps{Fleet: deps.Fleet, Metrics: deps.Metrics})
	if err != nil {
		return nil, err
	}
	var ns []*Notifier
	for i, c := range cfg.Alertmanagers {
		n, err := NewAlertmanager(fmt.Sprintf("alertmanager_%d", i), c, NotifierDeps{Metrics: deps.Metrics})
		if err != nil {
			return nil, err
		}
		ns = append(ns, n)
	}
	for i, c := range cfg.Webhooks {
		n, err := NewWebhook(fmt.Sprintf("webhook_%d", i), c, NotifierDeps{Metrics: deps.Metrics})
		if err != nil {
			return nil, err
		}
		ns = append(ns, n)
	}
	return NewStage(eng, next, cfg.Engine.Interval, StageDeps{Notifiers: ns, Logger: deps.Logger,
		Metrics: deps.Metrics, Now: deps.Now}), nil
}

// SetupDeps are Setup's collaborators; all may be nil.
type SetupDeps struct {
	Fleet   Fleet
	Metrics *Metrics
	Logger  zerolog.Logger
	Now     func() time.Time
}

// ServiceConfig is the `rules:` section of ncclwatch run's configuration.
// With no Files the rules are off.
type ServiceConfig struct {
	// Files are rule files; "builtin" is the built-in pack.
	Files         []string         `yaml:"files"`
	Engine        Config           `yaml:",inline"`
	Alertmanagers []NotifierConfig `yaml:"alertmanagers"`
	Webhooks      []NotifierConfig `yaml:"webhooks"`
}

// DefaultServiceConfig returns the defaults: the built-in pack, no
// notifiers.
func DefaultServiceConfig() ServiceConfig {
	return ServiceConfig{Files: []string{BuiltinName}, Engine: DefaultConfig()}
}

// Validate checks the section once at start.
func (c ServiceConfig) Validate() error {
	errs := []error{c.Engine.Validate()}
	for i, n := range c.Alertmanagers {
		errs = append(errs, n.Validate(fmt.Sprintf("rules.alertmanagers[%d]", i)))
	}
	for i, n := range c.Webhooks {
		errs = append(errs, n.Validate(fmt.Sprintf("rules.webhooks[%d]", i)))
	}
	return errors.Join(errs...)
}
