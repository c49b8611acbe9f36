// Package pipeline owns the domain types of ncclwatch (Record, Event,
// CommSummary, JobSummary, Batch), the stage interface (Consumer), the run
// loop that moves batches from a source to the sinks, and the stages
// between them.
//
// # The chain
//
// Every command builds the same chain and differs only in its source and
// its sink:
//
//		source → decode + parse → assemble → enrich → rules → sink
//
//	  - source: the Kafka source (pipeline/kafka) sends Inputs to Runner.Run;
//	    scan and guard read files, stdin or a child's output; demo runs the
//	    Kafka source on an in-process broker.
//	  - decode + parse: a Decoder (parsers.Decoder) turns a record into
//	    lines, and the one line parser (Classifier, parsers.Lines) reads
//	    each line once into an Event and a TelemetryLine.
//	  - assemble: Processor is the one door from a parsed line to the
//	    NCCL assembler (NCCLAssembler, pipeline/assemble); the line's
//	    telemetry goes on to the TelemetryAssembler. Processor.Record parses and applies a line on the
//	    caller's goroutine (the run loop's inline path, guard, and the
//	    rebuild after an assignment, which feeds stored events through it);
//	    Parser.Parse does the parsing half on another goroutine (the run
//	    loop's parse workers, scan's block scanner) and Processor.Apply the
//	    rest in input order. Both end in the same step (Processor.take).
//	  - enrich: Enricher joins a job with the inventory — the expectation
//	    of its nodes and their topology — before its summaries are built
//	    (assembly.summarize for run, runScan for scan).
//	  - rules: rules.Stage is a Consumer in front of the sink; scan
//	    evaluates the same rules over its one job.
//	  - sink: a Consumer — ClickHouse or JSON lines (sinks), the read API's
//	    live jobs and demo's terminal table after it; scan prints a table
//	    or one JSON document.
//
// # The run loop
//
// Runner.Run (runner*.go) is the delivery loop: one goroutine that takes
// the source's Inputs, batches, stores one batch at a time through the
// sink chain with retries, commits the offsets a stored batch covers and
// handles assignments and revocations. Its parse workers (runner_parse.go)
// decode and parse records beside it; the loop applies their results in
// input order. Two types it drives own the rest of the state:
//
//   - assembly (stage_assembly.go) is the assemble and enrich stages: the
//     Processor and NCCL assembler, the TelemetryAssembler, the open
//     batch's rows, which jobs changed since the last batch, the line
//     path's caches, and the flush preparation that builds summaries with
//     the Enricher. The loop feeds it lines (assembly.line) or parsed
//     records (assembly.apply) and asks it for the batch (assembly.prepare).
//   - commitPolicy (commit_policy.go) is the partitions' state: how far
//     each was read and its high water mark (backlog accounting), the
//     offsets the open batch covers, partial-line and fold-window holds,
//     and the commits deferred batches owe. The loop asks it which offsets
//     a batch may commit (stage, owe, pay) and what may be committed
//     between batches (released).
package pipeline
