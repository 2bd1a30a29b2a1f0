package e2b

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

func TestSignalNumber(t *testing.T) {
	for status, want := range map[string]int{
		"signal: killed": 9, "signal: terminated": 15, "signal: interrupt": 2, "signal: hangup": 1,
		"signal: aborted (core dumped)": 6, "signal: segmentation fault (core dumped)": 11,
		"signal: signal 34": 34, "signal: user defined signal 2": 12,
		"exit status 1": 0, "signal: nonsense": 0, "signal: signal 999": 0, "": 0,
	} {
		got, ok := signalNumber(status)
		if got != want || ok != (want != 0) {
			t.Errorf("signalNumber(%q) = %d, %v; want %d", status, got, ok, want)
		}
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		end  endEvent
		want int
		err  bool
	}{
		{endEvent{Exited: true, Status: "exit status 0"}, 0, false},
		{endEvent{ExitCode: 3, Exited: true, Status: "exit status 3"}, 3, false},
		{endEvent{ExitCode: -1, Status: "signal: killed", Error: "signal: killed"}, 137, false},
		{endEvent{ExitCode: -1, Status: "signal: terminated"}, 143, false},
		{endEvent{ExitCode: -1, Status: "stopped?"}, 0, true},
	} {
		got, err := exitCode(&tc.end)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("exitCode(%+v) = %d, %v; want %d (error %v)", tc.end, got, err, tc.want, tc.err)
		}
	}
}

// frames builds a Start answer from (flags, JSON) pairs.
func frames(msgs ...any) []byte {
	var b bytes.Buffer
	for i := 0; i < len(msgs); i += 2 {
		payload := []byte(msgs[i+1].(string))
		head := make([]byte, 5)
		head[0] = byte(msgs[i].(int))
		binary.BigEndian.PutUint32(head[1:], uint32(len(payload)))
		b.Write(head)
		b.Write(payload)
	}
	return b.Bytes()
}

func TestReadEvents(t *testing.T) {
	stream := frames(
		0, `{"event":{"start":{"pid":42}}}`,
		0, `{"event":{"keepalive":{}}}`,
		0, `{"event":{"data":{"stdout":"aGVsbG8K"}}}`,
		0, `{"event":{"data":{"stderr":"b29wcwo="}}}`,
		0, `{"event":{"end":{"exitCode":-1,"status":"signal: killed","error":"signal: killed"}}}`,
		2, `{}`,
	)
	var out, errOut bytes.Buffer
	st, err := readEvents(bytes.NewReader(stream), nil, &out, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(started{pid: 42, end: &endEvent{ExitCode: -1, Status: "signal: killed", Error: "signal: killed"}}, st, cmp.AllowUnexported(started{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if out.String() != "hello\n" || errOut.String() != "oops\n" {
		t.Errorf("stdout %q, stderr %q", out.String(), errOut.String())
	}

	for _, tc := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"empty", nil, "without an end-of-stream"},
		{"cut short", frames(0, `{"event":{"start":{"pid":1}}}`)[:10], "truncated"},
		{"no end event", frames(0, `{"event":{"start":{"pid":1}}}`, 2, `{}`), "without the command's end"},
		{"connect error", frames(2, `{"error":{"code":"invalid_argument","message":"cwd '/x' does not exist"}}`), "cwd '/x' does not exist"},
		{"bad json", frames(0, `{"event":`), "unreadable event"},
		{"compressed", []byte{1, 0, 0, 0, 0}, "compressed"},
		{"huge", []byte{0, 0xff, 0xff, 0xff, 0xff}, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readEvents(bytes.NewReader(tc.stream), nil, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	_, err = readEvents(bytes.NewReader(frames(2, `{"error":{"code":"not_found","message":"gone"}}`)), nil, io.Discard, io.Discard)
	if !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("not_found end of stream: %v, want ErrNotFound", err)
	}
}

func FuzzReadEvents(f *testing.F) {
	f.Add(frames(0, `{"event":{"start":{"pid":42}}}`, 0, `{"event":{"end":{"exited":true}}}`, 2, `{}`))
	f.Add(frames(2, `{"error":{"code":"unknown"}}`))
	f.Add([]byte{0, 0, 0, 0, 2, '{', '}'})
	f.Fuzz(func(t *testing.T, stream []byte) {
		st, err := readEvents(bytes.NewReader(stream), nil, io.Discard, io.Discard)
		if err == nil && st.end == nil {
			t.Errorf("no error and no end event")
		}
	})
}
