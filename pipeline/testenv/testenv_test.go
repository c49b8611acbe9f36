package testenv

import (
	"testing"
)

// recorder is a testing.TB whose Skip and Fatal are recorded instead of
// ending the test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = args[0].(string) }
func (r *recorder) Fatal(args ...any) { r.failed = args[0].(string) }

func TestServers(t *testing.T) {
	t.Setenv("NCCLWATCH_TEST_A", "a:1")
	t.Setenv("NCCLWATCH_TEST_B", "b:2")
	t.Setenv("NCCLWATCH_TEST_EMPTY", "")

	t.Run("set", func(t *testing.T) {
		r := &recorder{TB: t}
		got := Servers(r, "", "NCCLWATCH_TEST_A", "NCCLWATCH_TEST_B")
		if len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" || r.skipped != "" || r.failed != "" {
			t.Fatalf("got %q, skipped %q, failed %q", got, r.skipped, r.failed)
		}
		if s := Server(r, "NCCLWATCH_TEST_B", ""); s != "b:2" {
			t.Fatalf("Server = %q", s)
		}
	})
	t.Run("skip", func(t *testing.T) {
		t.Setenv(RequireServers, "")
		r := &recorder{TB: t}
		if got := Servers(r, "make test sets it", "NCCLWATCH_TEST_A", "NCCLWATCH_TEST_EMPTY"); got != nil {
			t.Fatalf("got %q", got)
		}
		if want := "NCCLWATCH_TEST_EMPTY not set (make test sets it)"; r.skipped != want || r.failed != "" {
			t.Fatalf("skipped %q (want %q), failed %q", r.skipped, want, r.failed)
		}
	})
	t.Run("require", func(t *testing.T) {
		t.Setenv(RequireServers, "1")
		r := &recorder{TB: t}
		if s := Server(r, "NCCLWATCH_TEST_EMPTY", ""); s != "" {
			t.Fatalf("got %q", s)
		}
		if want := "NCCLWATCH_TEST_EMPTY not set and NCCLWATCH_REQUIRE_SERVERS=1"; r.failed != want || r.skipped != "" {
			t.Fatalf("failed %q (want %q), skipped %q", r.failed, want, r.skipped)
		}
	})
}
