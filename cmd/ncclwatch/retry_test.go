package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ncclwatch/ncclwatch/pipeline/kafka"
)

// TestRetryReason: a corrupt record batch, as the partition reader wraps
// it, is told apart from other fetch errors in
// ncclwatch_source_retries_total.
func TestRetryReason(t *testing.T) {
	corrupt := fmt.Errorf("kafka fetch logs/3: %w", fmt.Errorf("record batch at offset 5: %w: CRC-32C 1, stored 2", kafka.ErrCorruptBatch))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{corrupt, "corrupt_batch"},
		{fmt.Errorf("kafka fetch logs/3: %w", errors.New("dial tcp 127.0.0.1:9092: connection refused")), "fetch"},
		{fmt.Errorf("kafka fetch logs/3: %w", kafka.ErrLoopStopped), "fetch"},
	} {
		if got := retryReason(tc.err); got != tc.want {
			t.Errorf("retryReason(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}
