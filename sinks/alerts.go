package sinks

// alertTables are the tables of the alerting issue (the alerts table);
// Consume writes them after the core tables.
var alertTables []table

// alertMigrations are migrations 6–19 (alerting).
func alertMigrations(f features) []migration { return nil }
