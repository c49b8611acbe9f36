package pipeline

import (
	"errors"
	"fmt"
	"testing"
)

type reasoned string

func (r reasoned) Error() string            { return string(r) }
func (r reasoned) DeadLetterReason() string { return string(r) }

func TestDeadLetterReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("cri record: %w", ErrOversized), "oversized"},
		{fmt.Errorf("decode: %w", reasoned("json_type")), "json_type"},
		{errors.New("something else"), "malformed"},
	} {
		if got := DeadLetterReason(tc.err); got != tc.want {
			t.Errorf("DeadLetterReason(%v) = %q; want %q", tc.err, got, tc.want)
		}
	}
}
