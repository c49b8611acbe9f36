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
//	    lines, and the one Parser, over the one line parser (Classifier,
//	    parsers.Lines), reads each line once into what the assembler needs
//	    (Parsed): on the run loop's parse workers, on scan's block-scanner
//	    goroutines (BlockScanner.ScanParsed), or on the caller's goroutine
//	    (Processor.Record: the run loop's inline path, guard, and the
//	    rebuild after an assignment, which feeds stored events through it).
//	  - assemble + enrich: Assembly is the stage. Its processor hands what
//	    was parsed, in input order, to the NCCL assembler (NCCLAssembler,
//	    pipeline/assemble) and the line's telemetry to the
//	    TelemetryAssembler (Processor.applyRange, the one applying step);
//	    its Enricher joins each job with the inventory — the expectation
//	    of its nodes and their topology — as its summary is built. Run
//	    feeds it parsed records (Assembly.apply) and asks it for batches;
//	    scan feeds it parsed chunks (Assembly.Apply) and guard lines
//	    (Assembly.Line), and both ask it for the one job's enriched
//	    summary (Assembly.Summary).
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
// handles assignments and revocations. Its parse workers (parse_pool.go;
// the loop's side in runner_parse.go) decode and parse records beside it;
// the loop applies their results in input order. It is run's and demo's
// delivery: scan and guard feed the same stages without it, since a
// complete file or a child's output has nothing to batch, retry, commit or
// rebalance (docs/architecture.md walks a record through both, and says
// what a file source into Run would cost). Two types it drives own the
// rest of the state:
//
//   - Assembly (stage_assembly.go) is the assemble and enrich stages: the
//     Processor and NCCL assembler, the TelemetryAssembler, the open
//     batch's rows, which jobs changed since the last batch, the line
//     path's caches, and the flush preparation that builds summaries with
//     the Enricher. The loop feeds it lines (Assembly.line) or parsed
//     records (Assembly.apply) and asks it for the batch (Assembly.prepare).
//   - commitPolicy (commit_policy.go) is the partitions' state: how far
//     each was read and its high water mark (backlog accounting), the
//     offsets the open batch covers, partial-line and fold-window holds,
//     and the commits deferred batches owe. The loop asks it which offsets
//     a batch may commit (stage, owe, pay) and what may be committed
//     between batches (released).
package pipeline
