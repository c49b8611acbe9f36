// Package testenv hands the integration tests the servers they run
// against. Each server is named by an environment variable
// (NCCLWATCH_TEST_KAFKA, NCCLWATCH_TEST_CLICKHOUSE, ...); without it a test
// skips, except under NCCLWATCH_REQUIRE_SERVERS=1 (make test sets it),
// where it fails: CI never skips silently. Only tests import it.
package testenv

import (
	"os"
	"strings"
	"testing"
)

// RequireServers names the variable that turns a missing server into a
// test failure.
const RequireServers = "NCCLWATCH_REQUIRE_SERVERS"

// Servers returns the values of the variables names, in order. When one is
// empty it ends the test: it fails under NCCLWATCH_REQUIRE_SERVERS=1, else
// it skips; hint (may be empty) says how to provide them.
func Servers(t testing.TB, hint string, names ...string) []string {
	t.Helper()
	vals := make([]string, len(names))
	var missing []string
	for i, n := range names {
		vals[i] = os.Getenv(n)
		if vals[i] == "" {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return vals
	}
	msg := strings.Join(missing, ", ") + " not set"
	if hint != "" {
		msg += " (" + hint + ")"
	}
	if os.Getenv(RequireServers) == "1" {
		t.Fatal(msg + " and " + RequireServers + "=1")
		return nil
	}
	t.Skip(msg)
	return nil
}

// Server is Servers of one variable.
func Server(t testing.TB, name, hint string) string {
	t.Helper()
	v := Servers(t, hint, name)
	if v == nil {
		return ""
	}
	return v[0]
}
