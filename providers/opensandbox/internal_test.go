package opensandbox

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// execd's line events are put back together byte for byte, whatever the
// output ended with (the command line ends it with "\n" and the marker).
func TestLines(t *testing.T) {
	for _, tc := range []struct {
		events []string
		want   string
	}{
		{[]string{"M", "M"}, ""},
		{[]string{"\n", "M", "M"}, "\n"},
		{[]string{"out1", "out2", "M", "M"}, "out1\nout2\n"},
		{[]string{"err1", "err2M", "M"}, "err1\nerr2"},
		{[]string{"a", "\n", "b", "M", "M"}, "a\n\nb\n"},
		{[]string{"a", "\n", "M", "M"}, "a\n\n"},
		{[]string{"xM", "M", "late"}, "x"},
		{[]string{"no", "marker"}, "no\nmarker"}, // the stream broke off
	} {
		var buf bytes.Buffer
		l := &lines{w: &buf, marker: "M"}
		for _, ev := range tc.events {
			if err := l.add(ev); err != nil {
				t.Fatal(err)
			}
		}
		if buf.String() != tc.want {
			t.Errorf("events %q: output %q, want %q", tc.events, buf.String(), tc.want)
		}
	}
}

func TestErrorEnd(t *testing.T) {
	ev := func(value string, tb ...string) streamEvent {
		e := streamEvent{Type: "error"}
		e.Error = &struct {
			EName     string   `json:"ename"`
			EValue    string   `json:"evalue"`
			Traceback []string `json:"traceback"`
		}{"CommandExecError", value, tb}
		return e
	}
	for _, tc := range []struct {
		ev      streamEvent
		code    int
		errText string
	}{
		{ev("7", "exit status 7"), 7, ""},
		{ev("-1", "signal: killed"), 137, ""},
		{ev("-1", "signal: terminated"), 143, ""},
		{ev("-1", "something else"), 0, "could not run the command"},
		{ev(`exec: "bash": executable file not found in $PATH`), 0, "could not run the command"},
		{streamEvent{Type: "error"}, 0, "without details"},
	} {
		end := errorEnd(tc.ev)
		if tc.errText != "" {
			if end.err == nil || !strings.Contains(end.err.Error(), tc.errText) {
				t.Errorf("%+v: err %v, want one saying %q", tc.ev.Error, end.err, tc.errText)
			}
			continue
		}
		if end.err != nil || end.code != tc.code {
			t.Errorf("%+v: code %d, err %v; want %d", tc.ev.Error, end.code, end.err, tc.code)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "7": 7 * time.Second, " 0 ": 0, "soon": 0, "-3": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := retryAfter(in, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestOctal(t *testing.T) {
	got := []int{octal(0o755), octal(0o644), octal(0o600), octal(0o4755)}
	if diff := cmp.Diff([]int{755, 644, 600, 4755}, got); diff != "" {
		t.Errorf("octal (-want +got):\n%s", diff)
	}
}

func TestCommandLine(t *testing.T) {
	got := commandLine("/work/a b", []string{"sh", "-c", "echo 'hi'"}, "crabbox-end-1")
	want := "mkdir -p -- '/work/a b' && cd -- '/work/a b' || exit 1\n" +
		"exec 3>&2 2>/dev/null\n(exec 2>&3 3>&-; exec sh -c 'echo '\\''hi'\\''')\ncrabbox_status=$?\n" +
		"printf '%s\\n%s' crabbox-end-1 crabbox-end-1\nprintf '%s\\n%s' crabbox-end-1 crabbox-end-1 >&3\nexit $crabbox_status\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("commandLine (-want +got):\n%s", diff)
	}
}
