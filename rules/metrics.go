package rules

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Metrics are the rules engine's and the notifiers' metrics, and the
// per-job gauges that let users write plain PromQL rules
// (deploy/prometheus/). They are registered on an injected registry. The
// per-job series use the label job_name, not job, which Prometheus sets to
// the scrape job.
type Metrics struct {
	Alerts           *prometheus.GaugeVec   // alertname, severity, state (pending|firing)
	Evaluations      prometheus.Counter     // Eval calls
	EvalFailures     *prometheus.CounterVec // alertname
	EvalDuration     prometheus.Histogram   //
	Subjects         prometheus.Gauge       // jobs held
	SubjectsCapacity prometheus.Gauge       // Config.MaxSubjects
	SubjectsDropped  prometheus.Counter     // activity of jobs beyond the cap
	States           prometheus.Gauge       // (rule, subject) states held

	JobNetworkClass *prometheus.GaugeVec // cluster, namespace, job_name, class: 1
	JobGDR          *prometheus.GaugeVec // cluster, namespace, job_name: 1 on, 0 off; absent when unknown
	JobMultiNode    *prometheus.GaugeVec // cluster, namespace, job_name: 1 or 0; absent when unknown
	JobNodes        *prometheus.GaugeVec // cluster, namespace, job_name: nnodes; absent when unknown
	JobVerdict      *prometheus.GaugeVec // cluster, namespace, job_name, verdict: 1
	PoolLastProof   *prometheus.GaugeVec // pool: unix seconds of the last RDMA proof

	Notifications     *prometheus.CounterVec // notifier, outcome (sent|retried|rejected|failed)
	NotificationDrops *prometheus.CounterVec // notifier: alerts dropped, queue full
	QueueLength       *prometheus.GaugeVec   // notifier
	QueueCapacity     *prometheus.GaugeVec   // notifier
	Unstored          prometheus.Gauge       // alert changes waiting for the sink
	UnstoredDrops     prometheus.Counter     // alert changes dropped, sink down too long
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	job := []string{"cluster", "namespace", "job_name"}
	m := &Metrics{
		Alerts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_alerts",
			Help: "Alerts of ncclwatch's rules by rule, severity and state (pending, firing)."}, []string{"alertname", "severity", "state"}),
		Evaluations: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_rule_evaluations_total",
			Help: "Rule engine evaluations."}),
		EvalFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_rule_evaluation_failures_total",
			Help: "Rule expressions that failed at run time, by rule."}, []string{"alertname"}),
		EvalDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ncclwatch_rule_evaluation_duration_seconds",
			Help: "Duration of one evaluation of all rules.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		Subjects: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_rule_jobs",
			Help: "Jobs the rule engine holds (queue length of its state)."}),
		SubjectsCapacity: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_rule_jobs_capacity",
			Help: "Jobs known only from activity the rule engine may hold."}),
		SubjectsDropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_rule_jobs_dropped_total",
			Help: "Activity of jobs beyond rules.max_subjects, dropped."}),
		States: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_rule_states",
			Help: "Alert states (rule × job or pool) held."}),
		JobNetworkClass: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_job_network_class",
			Help: "1 for the network class a job's NCCL uses: rdma, tcp, tcpx, mixed, none or unknown."}, append(job[:3:3], "class")),
		JobGDR: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_job_gdr",
			Help: "1 when a job's NCCL uses GPUDirect RDMA, 0 when it runs RDMA without it; absent without evidence."}, job),
		JobMultiNode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_job_multi_node",
			Help: "1 when a job spans nodes, 0 when it runs on one; absent when the log does not show it."}, job),
		JobNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_job_nodes",
			Help: "Nodes of a job's largest communicator; absent when unknown."}, job),
		JobVerdict: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_job_verdict",
			Help: "1 for a job's verdict: ok, unknown, no_evidence, degraded, gdr_off or socket_fallback."}, append(job[:3:3], "verdict")),
		PoolLastProof: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_pool_rdma_last_proof_timestamp_seconds",
			Help: "When an ok RDMA communicator or a canary last proved a node pool's RDMA path."}, []string{"pool"}),
		Notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_notifications_total",
			Help: "Notification requests by notifier and outcome (sent, retried, rejected, failed)."}, []string{"notifier", "outcome"}),
		NotificationDrops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ncclwatch_notifications_dropped_total",
			Help: "Alerts dropped because a notifier's queue was full."}, []string{"notifier"}),
		QueueLength: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_notification_queue_length",
			Help: "Alerts waiting in a notifier's queue."}, []string{"notifier"}),
		QueueCapacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ncclwatch_notification_queue_capacity",
			Help: "Capacity of a notifier's queue."}, []string{"notifier"}),
		Unstored: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ncclwatch_alerts_unstored",
			Help: "Alert state changes waiting for the sink to accept them."}),
		UnstoredDrops: prometheus.NewCounter(prometheus.CounterOpts{Name: "ncclwatch_alerts_unstored_dropped_total",
			Help: "Alert state changes dropped because the sink refused them for too long."}),
	}
	reg.MustRegister(m.Alerts, m.Evaluations, m.EvalFailures, m.EvalDuration, m.Subjects, m.SubjectsCapacity,
		m.SubjectsDropped, m.States, m.JobNetworkClass, m.JobGDR, m.JobMultiNode, m.JobNodes, m.JobVerdict,
		m.PoolLastProof, m.Notifications, m.NotificationDrops, m.QueueLength, m.QueueCapacity, m.Unstored,
		m.UnstoredDrops)
	return m
}

// jobMetricLabels remembers the series a job has, to replace and delete
// them.
type jobMetricLabels struct {
	set                     bool
	cluster, namespace, job string
	class, verdict          string
}

// setJob exports a job's gauges, replacing its previous series.
func (m *Metrics) setJob(s *subject, l *jobMetricLabels) {
	if s.sum == nil {
		return
	}
	m.deleteJob(l)
	sum := s.sum
	*l = jobMetricLabels{set: true, cluster: sum.Cluster, namespace: sum.Namespace, job: sum.Job,
		class: pipeline.ClassUnknown, verdict: string(sum.Verdict)}
	if sum.NetworkClass != nil {
		l.class = *sum.NetworkClass
	} else if sum.MultiNode != nil && !*sum.MultiNode {
		l.class = pipeline.ClassNone
	}
	id := []string{l.cluster, l.namespace, l.job}
	m.JobNetworkClass.WithLabelValues(l.cluster, l.namespace, l.job, l.class).Set(1)
	m.JobVerdict.WithLabelValues(l.cluster, l.namespace, l.job, l.verdict).Set(1)
	if sum.GDR != nil {
		m.JobGDR.WithLabelValues(id...).Set(b2f(*sum.GDR))
	}
	if sum.MultiNode != nil {
		m.JobMultiNode.WithLabelValues(id...).Set(b2f(*sum.MultiNode))
	}
	if sum.NNodes != nil {
		m.JobNodes.WithLabelValues(id...).Set(float64(*sum.NNodes))
	}
}

// deleteJob removes a job's gauges.
func (m *Metrics) deleteJob(l *jobMetricLabels) {
	if !l.set {
		return
	}
	id := []string{l.cluster, l.namespace, l.job}
	m.JobNetworkClass.DeleteLabelValues(l.cluster, l.namespace, l.job, l.class)
	m.JobVerdict.DeleteLabelValues(l.cluster, l.namespace, l.job, l.verdict)
	m.JobGDR.DeleteLabelValues(id...)
	m.JobMultiNode.DeleteLabelValues(id...)
	m.JobNodes.DeleteLabelValues(id...)
	l.set = false
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
