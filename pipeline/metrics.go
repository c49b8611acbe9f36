package pipeline

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the service's self-observability counters, registered on an
// injected registry (never the global one).
type Metrics struct {
	Records        prometheus.Counter
	Bytes          prometheus.Counter
	NCCLLines      prometheus.Counter
	ParseErrors    *prometheus.CounterVec // by reason
	DeadLetters    *prometheus.CounterVec // by reason
	BatchRows      prometheus.Histogram
	InsertLatency  *prometheus.HistogramVec // by table
	InsertErrors   prometheus.Counter
	Commits        prometheus.Counter
	CommitErrors   prometheus.Counter
	ConsumerLag    *prometheus.GaugeVec // by topic, partition
	JobsHeld       prometheus.Gauge
	BatchPending   prometheus.Gauge // rows waiting in the open batch
	BatchCapacity  prometheus.Gauge // max rows of a batch
	Rebuilds       prometheus.Counter
	RebuiltEvents  prometheus.Counter
	RebuildErrors  prometheus.Counter
	Evictions      prometheus.Counter
	Ready          prometheus.Gauge
	SinkHealthy    prometheus.Gauge // 0 while a batch has not been stored for pipeline.sink_timeout
	SourceQueue    prometheus.Gauge // records fetched, waiting for the runner
	SourceQueueCap prometheus.Gauge
	ParseQueue     prometheus.Gauge // parse jobs (runs of records) sent to the parse workers, not applied yet
	ParseQueueCap  prometheus.Gauge
	InvalidUTF8    prometheus.Counter     // JSON text repaired by the decoder
	SourceRetries  *prometheus.CounterVec // by reason: corrupt_batch, fetch
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Records:     prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_records_total", Help: "Kafka records consumed."}),
		Bytes:       prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_record_bytes_total", Help: "Bytes of Kafka record values consumed."}),
		NCCLLines:   prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_nccl_lines_total", Help: "Lines classified as NCCL lines."}),
		ParseErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_parse_errors_total", Help: "Records that could not be decoded, by reason."}, []string{"reason"}),
		DeadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_dead_letters_total", Help: "Records sent to the dead-letter table, by reason."}, []string{"reason"}),
		BatchRows: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ncclwatch_batch_rows", Help: "Rows per stored batch.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10)}),
		InsertLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ncclwatch_insert_duration_seconds", Help: "ClickHouse insert latency by table.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"table"}),
		InsertErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_insert_errors_total", Help: "Batches the sink rejected (each is retried)."}),
		Commits:        prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_offset_commits_total", Help: "Kafka offset commits after a stored batch."}),
		CommitErrors:   prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_offset_commit_errors_total", Help: "Failed offset commits (the data is stored; a replay is idempotent)."}),
		ConsumerLag:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_consumer_lag", Help: "Records between the high-water mark and the next offset, per partition."}, []string{"topic", "partition"}),
		JobsHeld:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_assembler_jobs", Help: "Jobs held by the assembler."}),
		BatchPending:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_batch_pending_rows", Help: "Rows in the open batch (queue length)."}),
		BatchCapacity:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_batch_capacity_rows", Help: "Rows at which a batch is flushed (queue capacity)."}),
		Rebuilds:       prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_state_rebuilds_total", Help: "Assembler rebuilds from stored events after an assignment."}),
		RebuiltEvents:  prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_state_rebuilt_events_total", Help: "Stored events replayed into the assembler."}),
		RebuildErrors:  prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_state_rebuild_errors_total", Help: "Failed attempts to load the stored events of a rebuild (retried)."}),
		Evictions:      prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_jobs_evicted_total", Help: "Idle jobs evicted after their final summary was stored."}),
		Ready:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_ready", Help: "1 when the pipeline is consuming and storing."}),
		SinkHealthy:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_sink_healthy", Help: "0 while the sink has not stored a batch within pipeline.sink_timeout, else 1."}),
		SourceQueue:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_source_queue_length", Help: "Fetched Kafka records waiting for the runner."}),
		SourceQueueCap: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_source_queue_capacity", Help: "Capacity of the fetched-records queue."}),
		ParseQueue:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_parse_queue_length", Help: "Runs of records handed to the parse workers and not applied yet."}),
		ParseQueueCap:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_parse_queue_capacity", Help: "Runs of records the parse workers may hold (pipeline.parse_workers x 2; 0 when parsing is inline)."}),
		InvalidUTF8: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_decoder_invalid_utf8_total",
			Help: "Lines (and metadata values) of JSON records whose invalid UTF-8 was replaced by U+FFFD; the record is kept."}),
		SourceRetries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_source_retries_total",
			Help: "Kafka errors the source retries, by reason: corrupt_batch (a record batch failing its CRC-32C or not decoding: its partition retries from that batch) or fetch (connection, leader, broker errors)."}, []string{"reason"}),
	}
	reg.MustRegister(m.Records, m.Bytes, m.NCCLLines, m.ParseErrors, m.DeadLetters, m.BatchRows, m.InsertLatency,
		m.InsertErrors, m.Commits, m.CommitErrors, m.ConsumerLag, m.JobsHeld, m.BatchPending, m.BatchCapacity,
		m.Rebuilds, m.RebuiltEvents, m.RebuildErrors, m.Evictions, m.Ready, m.SinkHealthy, m.SourceQueue, m.SourceQueueCap, m.ParseQueue, m.ParseQueueCap, m.InvalidUTF8, m.SourceRetries)
	return m
}
