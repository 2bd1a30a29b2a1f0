package main

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The host key file is gone when the ready line is passed on, and a file
// already gone is no error.
func TestForgetHostKey(t *testing.T) {
	file := filepath.Join(t.TempDir(), "host_key")
	if err := os.WriteFile(file, []byte("private"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w := &forgetHostKey{w: &out, file: file, log: slog.New(slog.DiscardHandler)}
	if _, err := w.Write([]byte("ready 2222\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(file); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("host key file after the ready line: %v, want it gone", err)
	}
	if _, err := w.Write([]byte("more\n")); err != nil {
		t.Fatal(err)
	}
	if out.String() != "ready 2222\nmore\n" {
		t.Errorf("passed on %q", out.String())
	}
}
