package pipeline

import "errors"

// DeadLetterReason returns the dead-letter reason label for an error a
// Decoder returned: "oversized" for ErrOversized, the error's own
// DeadLetterReason() when it has one (parsers.MalformedError: json_truncated,
// json_syntax, json_control, json_type, json_no_text), else "malformed".
// The labels are few and fixed, so they are safe as a metric label.
func DeadLetterReason(err error) string {
	if errors.Is(err, ErrOversized) {
		return "oversized"
	}
	var r interface{ DeadLetterReason() string }
	if errors.As(err, &r) {
		return r.DeadLetterReason()
	}
	return "malformed"
}
