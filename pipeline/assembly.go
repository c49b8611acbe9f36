package pipeline

import (
	"errors"
	"fmt"
	"time"
)

// AssemblerConfig bounds the assembler's memory and sets the default fleet
// policy.
type AssemblerConfig struct {
	// MaxJobs caps the jobs held at once; the least recently seen job is
	// pushed out first (its summaries as they stand are stored with the
	// next batch). 10 000 covers a large cluster's concurrent jobs.
	MaxJobs int `yaml:"max_jobs"`
	// MaxProcsPerJob caps the processes tracked per job; beyond it new
	// processes are counted but not tracked. 65 536 is more ranks than any
	// public NCCL job has run with.
	MaxProcsPerJob int `yaml:"max_procs_per_job"`
	// MaxWarnings caps the WARN messages kept per process (all are counted);
	// the first few say what went wrong, the rest repeat it.
	MaxWarnings int `yaml:"max_warnings"`
	// Expect is the policy for communicators whose job or node has no
	// policy of its own.
	Expect Expectation `yaml:"expect"`
}

// DefaultAssemblerConfig returns the defaults documented on each field.
func DefaultAssemblerConfig() AssemblerConfig {
	return AssemblerConfig{MaxJobs: 10000, MaxProcsPerJob: 65536, MaxWarnings: 8}
}

// Validate checks the configuration once at start.
func (c AssemblerConfig) Validate() error {
	var errs []error
	if c.MaxJobs <= 0 {
		errs = append(errs, errors.New("assembler.max_jobs: must be > 0"))
	}
	if c.MaxProcsPerJob <= 0 {
		errs = append(errs, errors.New("assembler.max_procs_per_job: must be > 0"))
	}
	if c.MaxWarnings < 0 {
		errs = append(errs, errors.New("assembler.max_warnings: must be >= 0"))
	}
	switch c.Expect.Network {
	case "", ClassRDMA, ClassTCP, ClassTCPX:
	default:
		errs = append(errs, fmt.Errorf("assembler.expect.network: %q is not rdma, tcp or tcpx", c.Expect.Network))
	}
	return errors.Join(errs...)
}

// NCCLAssembler is the communicator and job assembler (pipeline/assemble)
// as the processor and the runner use it: NCCL events in, summaries out.
type NCCLAssembler interface {
	Add(job string, meta *Meta, ev *Event, t time.Time)
	AddLauncher(job string, meta *Meta, host []byte, t time.Time)
	SetExpectation(job string, e *Expectation)
	Summaries(job string) (comms []CommSummary, sum JobSummary, ok bool)
	// Created counts the processes and communicators created in job's
	// state: when it grows, Summaries may show a communicator row no
	// earlier call showed.
	Created(job string) int
	// Pushed returns, once, the final summaries of the jobs pushed out to
	// make room for new ones (MaxJobs).
	Pushed() (comms []CommSummary, jobs []JobSummary)
	Nodes(job string) []string
	Jobs() []string
	Len() int
	Evict(job string)
	EvictIdle(cutoff time.Time) []string
	LastSeen(job string) (time.Time, bool)
}
