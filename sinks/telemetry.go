package sinks

// telemetryTables are the tables of the telemetry issue (training steps,
// nccl-tests results); Consume writes them after the core tables.
var telemetryTables []table

// telemetryMigrations are migrations 20–39 (job telemetry).
func telemetryMigrations(f features) []migration { return nil }
