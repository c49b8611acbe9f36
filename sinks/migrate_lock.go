package sinks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/proto"
)

// lockTable is the migration lock of a database: a table that one
// instance at a time creates (CREATE TABLE without IF NOT EXISTS succeeds
// for one caller, on a cluster for one distributed DDL task, each server
// running the queue in the same order) and drops when its migrations are
// applied. Migrations change the schema in steps that are each idempotent
// but not commutative: an instance still creating an early table while
// another has already replaced it with a view would bring the old table
// back. The lock keeps two instances from applying migrations at once.
const lockTable = "schema_migrations_lock"

// lockPoll is the first wait between two tries of a held lock; it doubles
// up to lockPollMax.
const (
	lockPoll    = 50 * time.Millisecond
	lockPollMax = time.Second
)

// lockStale is how long a held lock may go without a migration being
// recorded before it counts as left by a process that died while
// migrating: ten statements' time (staleLock where a test set it).
func (c *ClickHouse) lockStale() time.Duration {
	if c.staleLock > 0 {
		return c.staleLock
	}
	return 10 * c.cfg.QueryTimeout
}

// lockMigrations takes the migration lock of the database, waiting while
// another instance holds it. It returns done true, and no lock, when
// another instance applied every migration of ms meanwhile. A lock that is
// older than lockStale, during which no migration was recorded, is taken
// over: its holder died mid-way (the statements it ran are idempotent and
// are run again). unlock drops the lock.
func (c *ClickHouse) lockMigrations(ctx context.Context, ms []migration) (unlock func(), done bool, err error) {
	create := render("CREATE TABLE {db}."+lockTable+"{on_cluster} (holder String) ENGINE = Memory", c.cfg.Database, c.cfg.Cluster)
	drop := render("DROP TABLE IF EXISTS {db}."+lockTable+"{on_cluster}", c.cfg.Database, c.cfg.Cluster)
	unlock = func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.QueryTimeout)
		defer cancel()
		_ = c.conn.Exec(ctx, drop) // a lock left behind is taken over once stale
	}
	wait, applied, progress := lockPoll, -1, time.Now()
	for {
		err := c.exec(ctx, create)
		if err == nil {
			return unlock, false, nil
		}
		if !alreadyExists(err) {
			return nil, false, fmt.Errorf("take migration lock: %w", err)
		}
		have, err := c.appliedMigrations(ctx)
		if err != nil {
			return nil, false, err
		}
		if pending(ms, have) == 0 {
			return nil, true, nil
		}
		if len(have) != applied {
			applied, progress = len(have), time.Now()
		}
		if time.Since(progress) >= c.lockStale() {
			age, err := c.lockAge(ctx)
			if err != nil {
				return nil, false, err
			}
			if age >= c.lockStale() {
				if err := c.exec(ctx, drop); err != nil {
					return nil, false, fmt.Errorf("take over stale migration lock: %w", err)
				}
				progress = time.Now()
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil, false, fmt.Errorf("wait for migration lock: %w", ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, lockPollMax)
	}
}

// pending counts the migrations of ms not in have.
func pending(ms []migration, have map[int]bool) int {
	n := 0
	for _, m := range ms {
		if !have[m.Version] {
			n++
		}
	}
	return n
}

// lockAge is the age of the lock table by the server's clock, 0 when
// there is none.
func (c *ClickHouse) lockAge(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	rows, err := c.conn.Query(ctx, "SELECT toUInt32(greatest(now(), metadata_modification_time) - metadata_modification_time) FROM system.tables WHERE database = ? AND name = ?", c.cfg.Database, lockTable)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var secs uint32
	for rows.Next() {
		if err := rows.Scan(&secs); err != nil {
			return 0, err
		}
	}
	return time.Duration(secs) * time.Second, rows.Err()
}

// alreadyExists reports a CREATE TABLE refused for an existing table
// (code 57; on a cluster the servers' error carries the code too).
func alreadyExists(err error) bool {
	var ex *proto.Exception
	if errors.As(err, &ex) {
		return ex.Code == 57 || strings.Contains(ex.Message, "already exists")
	}
	return false
}
