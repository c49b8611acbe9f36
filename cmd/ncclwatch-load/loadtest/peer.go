package loadtest

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
	"github.com/ncclwatch/ncclwatch/sinks"
)

// peerResult is the Kafka engine's consumption of the backlog.
type peerResult struct {
	phase       phase
	rows        uint64
	firstCommit time.Duration
}

// Peer settings: one consumer and 1 Mi-row blocks gave the Kafka engine its
// best throughput on 2 cores when its settings were measured, so the peer
// is the engine at its best, not at its defaults.
const (
	peerConsumers = 1
	peerBlockSize = 1048576
	// peerStable is how long the peer's row count must stay unchanged
	// after its lag reached 0: ClickHouse 18.16's Kafka engine commits
	// offsets before its last insert is visible.
	peerStable = time.Second
)

// runPeer times ClickHouse's own Kafka engine on the backlog: a Kafka
// table (JSONEachRow, the record's log field) and a materialized view
// doing the minimal job — keep NCCL lines, extract `Using network`, flag
// GDRDMA — into a MergeTree table. Its fresh group is first reset to the
// earliest offsets with Kafka's ConsumerGroupCommand (18.16 sets no
// auto.offset.reset), then the clock starts when the view is created
// (the engine streams only to attached views) and stops when the group's
// lag is 0 and the row count is stable.
func runPeer(ctx context.Context, o Options, ch *sinks.ClickHouse, offs *kafka.GroupOffsets, end []int64, backlog phase, stderr io.Writer) (*peerResult, error) {
	group := o.Topic + "-peer"
	args := append(append([]string(nil), o.KafkaTool[1:]...), "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
		"--bootstrap-server", o.Brokers[0], "--group", group, "--topic", o.Topic, "--reset-offsets", "--to-earliest", "--execute")
	cmd := exec.CommandContext(ctx, o.KafkaTool[0], args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("reset group %s to earliest: %w\n%s", group, err, out)
	}
	db := o.Database
	for _, stmt := range []string{
		"CREATE TABLE " + db + ".peer_nccl (log String, network String, gdr UInt8) ENGINE = MergeTree ORDER BY tuple()",
		fmt.Sprintf("CREATE TABLE %s.peer_queue (log String) ENGINE = Kafka SETTINGS kafka_broker_list = '%s', kafka_topic_list = '%s', "+
			"kafka_group_name = '%s', kafka_format = 'JSONEachRow', kafka_num_consumers = %d, kafka_max_block_size = %d",
			db, strings.Join(o.Brokers, ","), o.Topic, group, peerConsumers, peerBlockSize),
	} {
		if err := execSQL(ctx, ch, stmt); err != nil {
			return nil, fmt.Errorf("%s: %w", stmt, err)
		}
	}
	defer func() {
		// Dropping the Kafka table stops its consumer; the database goes
		// at the end of the run.
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = execSQL(dctx, ch, "DROP TABLE IF EXISTS "+db+".peer_mv")
		_ = execSQL(dctx, ch, "DROP TABLE IF EXISTS "+db+".peer_queue")
	}()
	start := time.Now()
	mv := "CREATE MATERIALIZED VIEW " + db + ".peer_mv TO " + db + ".peer_nccl AS SELECT log, " +
		`extract(log, 'Using network ([^\\n]+)') AS network, toUInt8(position(log, '/GDRDMA') > 0) AS gdr ` +
		"FROM " + db + ".peer_queue WHERE position(log, 'NCCL') > 0"
	if err := execSQL(ctx, ch, mv); err != nil {
		return nil, fmt.Errorf("%s: %w", mv, err)
	}
	lag, err := waitLagZero(ctx, offs, group, end, nil)
	if err != nil {
		return nil, fmt.Errorf("kafka engine consuming the backlog: %w", err)
	}
	// Lag 0, then the row count until it stays the same for peerStable.
	rowsSQL := "SELECT count() FROM " + db + ".peer_nccl"
	done := lag.done
	last, err := count(ctx, ch, rowsSQL)
	if err != nil {
		return nil, err
	}
	for stable := time.Now(); time.Since(stable) < peerStable; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		n, err := count(ctx, ch, rowsSQL)
		if err != nil {
			return nil, err
		}
		if n != last {
			last, done, stable = n, time.Now(), time.Now()
		}
	}
	fmt.Fprintf(stderr, "load: peer done: %d rows\n", last)
	return &peerResult{
		phase:       phase{records: backlog.records, bytes: backlog.bytes, wall: done.Sub(start)},
		rows:        last,
		firstCommit: lag.first.Sub(start),
	}, nil
}
