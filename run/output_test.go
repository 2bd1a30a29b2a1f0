package run

import (
	"bytes"
	"errors"
	"testing"
)

func TestStatusWriterSplitsStatusLine(t *testing.T) {
	const marker = "crabbox-run-abc"
	tests := []struct {
		name       string
		stream     string
		wantStatus string
		wantOut    string
	}{
		{"status first", marker + " ok\nhello\n", "ok", "hello\n"},
		{"rc noise before", "motd\n" + marker + " ok\nhello", "ok", "motd\nhello"},
		{"failure", marker + " nodir\n", "nodir", ""},
		{"no status", "just output", "", "just output"},
		{"marker prefix only", "crabbox-run-ab", "", "crabbox-run-ab"},
		{"marker later in output is data", marker + " ok\n" + marker + " ok\n", "ok", marker + " ok\n"},
	}
	for _, tt := range tests {
		// Every way of cutting the stream into two writes.
		for cut := 0; cut <= len(tt.stream); cut++ {
			var out bytes.Buffer
			o := newOutput(&out, nil, marker)
			o.stdout.Write([]byte(tt.stream[:cut]))
			o.stdout.Write([]byte(tt.stream[cut:]))
			o.stdout.Flush()
			if got := o.stdout.Status(); got != tt.wantStatus {
				t.Errorf("%s, cut at %d: status = %q, want %q", tt.name, cut, got, tt.wantStatus)
			}
			if got := out.String(); got != tt.wantOut {
				t.Errorf("%s, cut at %d: output = %q, want %q", tt.name, cut, got, tt.wantOut)
			}
		}
	}
}

type errWriter struct{ n int }

func (w *errWriter) Write(p []byte) (int, error) {
	w.n++
	return 0, errors.New("closed")
}

func TestOutputStopsWritingToFailedWriter(t *testing.T) {
	w := &errWriter{}
	var stdout bytes.Buffer
	o := newOutput(&stdout, w, "m")
	o.stderr.Write([]byte("a"))
	o.stderr.Write([]byte("b"))
	o.stdout.Write([]byte("m ok\nstill written"))
	if w.n != 1 {
		t.Errorf("failed writer called %d times, want 1", w.n)
	}
	select {
	case <-o.failed:
	default:
		t.Error("failure not signalled")
	}
	if o.writeErr() == nil {
		t.Error("writeErr = nil")
	}
	if got := o.stderr.Tail(); got != "ab" {
		t.Errorf("Tail = %q, want %q", got, "ab")
	}
	if got := stdout.String(); got != "still written" {
		t.Errorf("other writer got %q, want %q", got, "still written")
	}
}
