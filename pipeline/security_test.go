package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	nl, crlf, bare := write("nl", "s3cret\n"), write("crlf", "s3cret\r\n"), write("bare", "s3cret")
	for _, f := range []string{nl, crlf, bare} {
		if got, err := ReadSecret("x.password", "", f); err != nil || got != "s3cret" {
			t.Errorf("ReadSecret(%s) = %q, %v; want s3cret", filepath.Base(f), got, err)
		}
	}
	if got, err := ReadSecret("x.password", "inline", ""); err != nil || got != "inline" {
		t.Errorf("ReadSecret(inline) = %q, %v", got, err)
	}
	big := write("big", strings.Repeat("k", maxSecretBytes+1))
	empty := write("empty", "\n")
	for _, tc := range []struct {
		value, file, want string
		sentinel          bool
	}{
		{"inline", nl, "x.password, x.password_file: set one, not both", false},
		{"", filepath.Join(dir, "missing"), "x.password_file: open ", false},
		{"", big, "x.password_file: " + big + " is over 4096 bytes", true},
		{"", empty, "x.password_file: " + empty + " is empty", true},
	} {
		_, err := ReadSecret("x.password", tc.value, tc.file)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || errors.Is(err, ErrSecretFile) != tc.sentinel {
			t.Errorf("ReadSecret(%q, %s) = %v; want %q (ErrSecretFile %v)", tc.value, filepath.Base(tc.file), err, tc.want, tc.sentinel)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error %v shows the secret", err)
		}
	}
}
