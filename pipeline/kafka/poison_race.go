//go:build race

package kafka

// poisonReleased: race-enabled builds (make test) overwrite a released
// arena before pooling it, so that a record read after its run was
// released reads garbage and fails the test that reads it.
const poisonReleased = true
