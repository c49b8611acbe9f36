package kafka

import "testing"

// Integration tests against the real broker that deploy/local/kafka.sh
// starts (NCCLWATCH_TEST_KAFKA, set by the Makefile). They skip without it,
// and fail instead under NCCLWATCH_REQUIRE_SERVERS=1.

func TestIntegrationConsumeAll(t *testing.T) { testConsumeAll(t, realBrokers(t)) }

func TestIntegrationResumeAfterCommit(t *testing.T) { testResume(t, realBrokers(t)) }

func TestIntegrationRebalance(t *testing.T) { testRebalance(t, realBrokers(t)) }
