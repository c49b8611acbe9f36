package sinks

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"

	"github.com/ncclwatch/ncclwatch/pipeline"
)

// Consume inserts the batch: events, dead letters, communicator summaries
// and job summaries, one batch insert per non-empty table, each tried once:
// retrying is the run loop's job (pipeline.Runner), the one place retry
// policy lives. An error that a retry cannot fix (a schema mismatch, a
// missing table, an authorisation error) is wrapped with
// pipeline.Permanent, with a hint of what to change.
//
// Tables inserted before a failing one keep their rows; resending the batch
// is harmless, since storage folds rows with equal coordinates or keys.
// Consume does not keep b.
func (c *ClickHouse) Consume(ctx context.Context, b *pipeline.Batch) error {
	if c.tables == nil {
		c.tables = tablesOf(c.series.planned)
	}
	// The series of b's training steps this process has not sent: their
	// table is written before the rows that name them.
	c.series.plan(b)
	seriesStored := false
	defer func() {
		if !seriesStored {
			c.series.forget()
		}
	}()
	for i := range c.tables {
		t := &c.tables[i]
		n := t.rows(b)
		if n == 0 {
			continue
		}
		if err := c.insert(ctx, t, b, n); err != nil {
			c.failures.Add(1)
			return err
		}
		if t.name == seriesTableName {
			c.series.stored()
			seriesStored = true
		}
		c.rows.Add(uint64(n))
	}
	c.batches.Add(1)
	return nil
}

// insert writes one table's rows of b.
func (c *ClickHouse) insert(ctx context.Context, t *table, b *pipeline.Batch, n int) error {
	if settings := c.insertSettings(t, b); len(settings) > 0 {
		ctx = clickhouse.Context(ctx, clickhouse.WithSettings(settings))
	}
	start := time.Now()
	err := c.insertOnce(ctx, t, b)
	if c.onInsert != nil {
		c.onInsert(t.name, n, time.Since(start), err)
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("clickhouse insert %s: %w (last error: %v)", t.name, ctx.Err(), err)
	}
	return classify(fmt.Errorf("clickhouse insert %s: %w", t.name, err))
}

// insertSettings are the settings of one table's insert of b.
func (c *ClickHouse) insertSettings(t *table, b *pipeline.Batch) clickhouse.Settings {
	settings := clickhouse.Settings{}
	if c.features.DedupToken {
		// The same token on every attempt: a retry of an insert that did
		// reach the server (the answer was lost) is then dropped by it.
		settings["insert_deduplication_token"] = t.token(b)
	}
	if c.cfg.Cluster != "" {
		// The Distributed table writes each shard's rows to a replica
		// before the insert returns, instead of queueing them on the
		// local disk of the server we talk to: the offsets are
		// committed only for rows a shard holds, and a failed insert
		// is retried whole (the replicas drop the blocks they have).
		// The setting keeps this name as an alias on 23.x+
		// (distributed_foreground_insert).
		settings["insert_distributed_sync"] = 1
	}
	return settings
}

// classify wraps err with pipeline.Permanent and a hint when no retry
// fixes it: the one place ClickHouse errors are classified.
func classify(err error) error {
	if isPermanent(err) && !pipeline.IsPermanent(err) {
		return pipeline.Permanent(fmt.Errorf("%w%s", err, hint(err)))
	}
	return err
}

// insertOnce makes a fresh driver batch from b and sends it. A driver batch
// is never reused after a failure: its connection and buffers are in an
// unknown state.
func (c *ClickHouse) insertOnce(ctx context.Context, t *table, b *pipeline.Batch) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	blockRows := c.blockRows()
	batch, err := c.prepareInsert(ctx, t, b, blockRows)
	if err != nil {
		return err
	}
	if err := t.fill(batch, b, &c.cfg, blockRows); err != nil {
		_ = batch.Abort()
		var send sendError
		if errors.As(err, &send) {
			return send.err
		}
		// The values do not fit the table's columns: the table is not
		// the one this code was written for.
		return pipeline.Permanent(err)
	}
	return batch.Send()
}

// insertBlockRows is the most rows of one block of an insert (table.fill):
// the driver's columns and the encoded block then hold a few MB whatever
// the batch's size. The server joins an insert's blocks into parts of up
// to min_insert_block_size_rows (about a million rows), so the parts are
// those of one block.
const insertBlockRows = 8192

// blockRows is the block size of an insert (table.fill). Through a
// Distributed table written synchronously (Cluster) the server does not
// join an insert's blocks: each would be a part on its shard, so the
// insert is one block.
func (c *ClickHouse) blockRows() int {
	if c.cfg.Cluster != "" {
		return 0
	}
	return insertBlockRows
}

// prepareInsert asks the server for the block of an insert into t, its
// String columns made at the size of b's values in blocks of blockRows
// (colsize.go).
func (c *ClickHouse) prepareInsert(ctx context.Context, t *table, b *pipeline.Batch, blockRows int) (driver.Batch, error) {
	hint := c.strSizes.hint(t, b, &c.cfg, blockRows)
	announce(hint)
	batch, err := c.conn.PrepareBatch(ctx, t.insertSQL(c.cfg.Database))
	withdraw(hint)
	if err != nil {
		return nil, err
	}
	c.strSizes.learn(t, batch.Columns())
	return batch, nil
}

// Exception codes of ClickHouse (src/Common/ErrorCodes.cpp) that no retry
// fixes: the statement or the data does not fit the schema, or the account
// may not write.
var permanentCodes = map[int32]bool{
	6:   true, // CANNOT_PARSE_TEXT
	8:   true, // THERE_IS_NO_COLUMN
	10:  true, // NOT_FOUND_COLUMN_IN_BLOCK
	16:  true, // NO_SUCH_COLUMN_IN_TABLE
	20:  true, // NUMBER_OF_COLUMNS_DOESNT_MATCH
	27:  true, // CANNOT_PARSE_INPUT_ASSERTION_FAILED
	36:  true, // BAD_ARGUMENTS
	41:  true, // CANNOT_PARSE_DATETIME
	43:  true, // ILLEGAL_TYPE_OF_ARGUMENT
	44:  true, // ILLEGAL_COLUMN
	47:  true, // UNKNOWN_IDENTIFIER
	48:  true, // NOT_IMPLEMENTED
	53:  true, // TYPE_MISMATCH
	60:  true, // UNKNOWN_TABLE
	62:  true, // SYNTAX_ERROR
	69:  true, // ARGUMENT_OUT_OF_BOUND
	70:  true, // CANNOT_CONVERT_TYPE
	81:  true, // UNKNOWN_DATABASE
	115: true, // UNKNOWN_SETTING
	117: true, // INCORRECT_DATA
	131: true, // TOO_LARGE_STRING_SIZE
	164: true, // READONLY
	192: true, // UNKNOWN_USER
	193: true, // WRONG_PASSWORD
	291: true, // DATABASE_ACCESS_DENIED
	386: true, // NO_COMMON_TYPE
	497: true, // ACCESS_DENIED
	516: true, // AUTHENTICATION_FAILED
}

// isPermanent classifies an insert error. Everything not known to be
// permanent is retried: a network error, a timeout, overload (TOO_MANY_PARTS,
// MEMORY_LIMIT_EXCEEDED, TOO_MANY_SIMULTANEOUS_QUERIES), a replica that is
// read-only for a while — the caller keeps the offsets uncommitted, which is
// the safe side for an error nobody anticipated.
func isPermanent(err error) bool {
	if pipeline.IsPermanent(err) {
		return true
	}
	var ex *proto.Exception
	if errors.As(err, &ex) {
		return permanentCodes[ex.Code]
	}
	return false
}

// badCertificate reports whether err is a server certificate that does not
// verify (unknown CA, wrong host name, expired).
func badCertificate(err error) bool {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &verify)
}

// hint says what an operator should change for a permanent error.
func hint(err error) string {
	var ex *proto.Exception
	if !errors.As(err, &ex) {
		return ""
	}
	switch ex.Code {
	case 8, 10, 16, 47, 60, 81:
		return " (the schema is not the one this ncclwatch writes: run `ncclwatch migrate`, and check that no one altered the tables)"
	case 164, 192, 193, 291, 497, 516:
		return " (check clickhouse.username, clickhouse.password or clickhouse.password_file, and the account's grants on clickhouse.database)"
	}
	return ""
}
