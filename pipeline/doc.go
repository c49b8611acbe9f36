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
//	    (Runner.summarize for run, runScan for scan).
//	  - rules: rules.Stage is a Consumer in front of the sink; scan
//	    evaluates the same rules over its one job.
//	  - sink: a Consumer — ClickHouse or JSON lines (sinks), the read API's
//	    live jobs and demo's terminal table after it; scan prints a table
//	    or one JSON document.
//
// The run loop (Runner.Run, runner*.go) delivers: it batches, stores one
// batch at a time through the sink chain with retries, commits the
// offsets a stored batch covers and handles assignments and revocations.
package pipeline
