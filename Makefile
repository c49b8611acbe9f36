# ncclwatch developer targets. `make test` is the one command CI runs
# (.ci/run): it installs and starts a real Kafka broker and a real ClickHouse
# server on loopback (deploy/local/), runs vet, the race-enabled unit and
# integration tests and a short fuzz smoke run, then stops the servers.

GO        ?= go
# The tests, fuzz runs and benchmarks build without the CPU profile of
# cmd/ncclwatch/default.pgo: it changes no behaviour, and compiling every
# dependency of the command against it again took make test from ~11 to
# ~20 minutes on 2 cores. `make build` (-pgo=auto on its command line wins),
# plain go build / go run, deploy/local/load.sh and the Dockerfile use it.
export GOFLAGS ?= -pgo=off
# Fuzz runs are bounded by execution counts, not time: a time-bounded run
# can fail with "context deadline exceeded" when a worker is slow to stop on
# a loaded machine (seen once in CI-like runs here). ~10 s each on 2 cores.
FUZZTIME  ?= 150000x
FUZZTIME_RULES ?= 8000x
FUZZMIN   ?= 200x
KAFKA_PORT ?= 19092
KAFKA_CONTROLLER_PORT ?= 19093
CLICKHOUSE_PORT ?= 19000
CLICKHOUSE_HTTP_PORT ?= 18123
# Alertmanager's test config notifies ALERTMANAGER_PORT+1, which must be free too.
ALERTMANAGER_PORT ?= 19094
# The ClickHouse test cluster of make test-cluster (deploy/local/clickhouse-cluster.sh):
# servers on CLICKHOUSE_CLUSTER_PORT, +10, +20 (native; +1 HTTP, +2 interserver),
# the shard of each server in CLICKHOUSE_CLUSTER_SHARDS, ZooKeeper on ZOOKEEPER_PORT.
CLICKHOUSE_CLUSTER_PORT ?= $(shell expr $(CLICKHOUSE_PORT) + 100)
CLICKHOUSE_CLUSTER_SHARDS ?= 1 1 2
CLICKHOUSE_CLUSTER_NAME ?= ncclwatch
ZOOKEEPER_PORT ?= $(shell expr $(CLICKHOUSE_PORT) + 181)
export CLICKHOUSE_CLUSTER_PORT CLICKHOUSE_CLUSTER_SHARDS CLICKHOUSE_CLUSTER_NAME ZOOKEEPER_PORT
# The secured listeners beside the plaintext ones: Kafka SASL_SSL (SCRAM over
# TLS, ACLs) and ClickHouse's TLS native port with a password user. Set one
# empty to start that server without it (its secured tests then fail under
# make test, which requires every server).
KAFKA_SASL_PORT ?= $(shell expr $(KAFKA_PORT) + 4)
CLICKHOUSE_TLS_PORT ?= $(shell expr $(CLICKHOUSE_PORT) + 440)
export KAFKA_PORT KAFKA_CONTROLLER_PORT CLICKHOUSE_PORT CLICKHOUSE_HTTP_PORT ALERTMANAGER_PORT
export KAFKA_SASL_PORT CLICKHOUSE_TLS_PORT
RUN_TMP := $(or $(TMPDIR),/tmp)
export KAFKA_SECURE_DIR ?= $(RUN_TMP)/ncclwatch-kafka-$(KAFKA_PORT)/secure
export CLICKHOUSE_SECURE_DIR ?= $(RUN_TMP)/ncclwatch-clickhouse-$(CLICKHOUSE_PORT)/secure

# Integration tests find the servers through these.
export NCCLWATCH_TEST_KAFKA ?= 127.0.0.1:$(KAFKA_PORT)
export NCCLWATCH_TEST_CLICKHOUSE ?= 127.0.0.1:$(CLICKHOUSE_PORT)
export NCCLWATCH_TEST_ALERTMANAGER ?= 127.0.0.1:$(ALERTMANAGER_PORT)
export NCCLWATCH_TEST_KAFKA_SASL ?= $(if $(KAFKA_SASL_PORT),127.0.0.1:$(KAFKA_SASL_PORT))
export NCCLWATCH_TEST_KAFKA_SECURE_DIR ?= $(KAFKA_SECURE_DIR)
export NCCLWATCH_TEST_CLICKHOUSE_TLS ?= $(if $(CLICKHOUSE_TLS_PORT),127.0.0.1:$(CLICKHOUSE_TLS_PORT))
export NCCLWATCH_TEST_CLICKHOUSE_SECURE_DIR ?= $(CLICKHOUSE_SECURE_DIR)

.PHONY: all build quickstart test test-cluster unit vet k8s fuzz promtool chdb services-start services-stop bench demo

all: build

# ncclwatch version prints the module version and VCS revision from the
# build information; -X adds `git describe` where Go's VCS stamping is off.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

build:
	$(GO) build -pgo=auto -ldflags "-X main.version=$(VERSION)" -o bin/ncclwatch ./cmd/ncclwatch

# quickstart: Kafka, ClickHouse and `ncclwatch run` left running on
# loopback with three bundled real logs replayed (deploy/local/quickstart.sh).
quickstart: build
	deploy/local/quickstart.sh start

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	cd deploy/kubernetes && $(GO) vet ./...

# k8s: the Kubernetes manifests rendered with kustomize and decoded strictly
# into their typed API structs (a module of its own: deploy/kubernetes/go.mod).
k8s:
	cd deploy/kubernetes && $(GO) test -count=1 ./...

# unit runs the tests that need no server.
unit: vet
	NCCLWATCH_TEST_KAFKA= NCCLWATCH_TEST_CLICKHOUSE= NCCLWATCH_TEST_ALERTMANAGER= \
	NCCLWATCH_TEST_KAFKA_SASL= NCCLWATCH_TEST_CLICKHOUSE_TLS= NCCLWATCH_TEST_CHDB= NCCLWATCH_TEST_KCAT= $(GO) test -race -count=1 ./...
	@$(MAKE) --no-print-directory k8s

fuzz:
	$(GO) test ./parsers/ -run '^$$' -fuzz '^FuzzParseNCCL$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN)
	$(GO) test ./parsers/ -run '^$$' -fuzz '^FuzzStripPrefix$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN)
	$(GO) test ./parsers/ -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN)
	$(GO) test ./parsers/ -run '^$$' -fuzz '^FuzzParseCheckpoint$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN)
	$(GO) test ./parsers/ -run '^$$' -fuzz '^FuzzTokenSets$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN)
	$(GO) test ./parsers/ -run '^$$' -fuzz '^FuzzLine$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN)
	$(GO) test ./parsers/ -run '^$$' -fuzz '^FuzzFinderCovers$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN)
	$(GO) test ./rules/ -run '^$$' -fuzz '^FuzzRulesParse$$' -fuzztime $(FUZZTIME_RULES) -fuzzminimizetime $(FUZZMIN)

# promtool: deploy/prometheus rules through Debian's promtool (check and
# unit tests) and amtool check-config; installs the packages when missing.
promtool:
	deploy/local/promtool.sh check

# chdb: the schema, the sink's inserts and every cookbook, documentation
# (README.md, docs/*.md) and Grafana query on chDB's engine (ClickHouse 26.x
# in a Python library, virtualenv made by deploy/local/chdb.sh;
# sinks/chdb_test.go). Part of make test.
chdb:
	NCCLWATCH_TEST_CHDB="$$(deploy/local/chdb.sh python)" $(GO) test -count=1 -run '^TestChDB$$' ./sinks/

services-start:
	deploy/local/kcat.sh install
	deploy/local/kafka.sh start
	deploy/local/clickhouse.sh start
	deploy/local/alertmanager.sh start

services-stop:
	-deploy/local/kafka.sh stop
	-deploy/local/clickhouse.sh stop
	-deploy/local/alertmanager.sh stop

# test: the whole suite against real servers; the servers are stopped
# whatever the outcome.
test: vet
	@$(MAKE) --no-print-directory services-start
	@status=0; \
	$(MAKE) --no-print-directory promtool || status=$$?; \
	chdb_python="$$(deploy/local/chdb.sh python)" || status=$$?; \
	NCCLWATCH_TEST_CHDB="$$chdb_python" NCCLWATCH_TEST_KCAT="$$(deploy/local/kcat.sh path)" NCCLWATCH_REQUIRE_SERVERS=1 $(GO) test -race -count=1 -timeout 18m ./... || status=$$?; \
	$(MAKE) --no-print-directory k8s || status=$$?; \
	if [ $$status -eq 0 ]; then $(MAKE) --no-print-directory fuzz || status=$$?; fi; \
	$(MAKE) --no-print-directory services-stop; \
	exit $$status

# test-cluster: two `ncclwatch run` instances writing through a ClickHouse
# cluster (2 replicas of shard 1, shard 2; ZooKeeper), a replica and an
# instance killed mid-stream, the end state compared with one instance on
# one server (cmd/ncclwatch/cluster_test.go). Starts and stops Kafka, the
# single server and the cluster; .ci/run runs it after make test.
test-cluster:
	@status=0; \
	{ deploy/local/kafka.sh start && deploy/local/clickhouse.sh start && deploy/local/clickhouse-cluster.sh start; } || status=$$?; \
	if [ $$status -eq 0 ]; then \
		NCCLWATCH_TEST_CLICKHOUSE_CLUSTER="$$(deploy/local/clickhouse-cluster.sh addrs)" \
		NCCLWATCH_TEST_CLICKHOUSE_CLUSTER_NAME=$(CLICKHOUSE_CLUSTER_NAME) NCCLWATCH_REQUIRE_SERVERS=1 \
		$(GO) test -count=1 -timeout 15m -run '^(TestIntegrationCluster|TestClusterCookbook|TestClusterLoadEventsBounded|TestClusterMigrateConcurrent)$$' -v ./sinks/ ./cmd/ncclwatch/ || status=$$?; \
	fi; \
	deploy/local/clickhouse-cluster.sh stop; deploy/local/clickhouse.sh stop; deploy/local/kafka.sh stop; \
	exit $$status

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./parsers/ ./pipeline/ ./cmd/ncclwatch/
