package e2b

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strconv"

	"github.com/crabbox-dev/crabbox/provider"
)

// maxFrame bounds one Connect message from envd (its output chunks are at
// most 32 KiB before base64).
const maxFrame = 4 << 20

// keepalivePingSeconds asks envd for a keepalive event on a quiet command
// stream, so proxies between crabbox and the sandbox keep it open.
const keepalivePingSeconds = "50"

// envd is a client of one sandbox's envd.
type envd struct {
	sandboxID string
	base      string
	token     string // X-Access-Token; empty when the sandbox is not secured
	user      string
	client    *http.Client // no overall timeout: commands and files run as long as ctx allows
}

func (e *envd) header(req *http.Request) {
	req.Header.Set("E2b-Sandbox-Id", e.sandboxID)
	req.Header.Set("E2b-Sandbox-Port", strconv.Itoa(EnvdPort))
	if e.token != "" {
		req.Header.Set("X-Access-Token", e.token)
	}
	if e.user != "" {
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(e.user+":")))
	}
}

// processConfig, startRequest and the events below are envd's
// process.proto messages in protobuf's JSON mapping.
type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
}

type startRequest struct {
	Process processConfig `json:"process"`
	Tag     string        `json:"tag,omitempty"`
	Stdin   bool          `json:"stdin"`
}

type processEvent struct {
	Start *struct {
		Pid uint32 `json:"pid"`
	} `json:"start"`
	Data *struct {
		Stdout []byte `json:"stdout"`
		Stderr []byte `json:"stderr"`
		Pty    []byte `json:"pty"`
	} `json:"data"`
	End       *endEvent `json:"end"`
	Keepalive *struct{} `json:"keepalive"`
}

type endEvent struct {
	ExitCode int32  `json:"exitCode"`
	Exited   bool   `json:"exited"`
	Status   string `json:"status"`
	Error    string `json:"error"`
}

type processSelector struct {
	Pid uint32 `json:"pid,omitempty"`
	Tag string `json:"tag,omitempty"`
}

// connectError is the error of a Connect end-of-stream message or unary
// error answer.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// started is what a command stream said before it ended or broke.
type started struct {
	pid uint32
	end *endEvent
}

// start runs cfg with tag through process.Process/Start, copying its
// output to stdout and stderr as it arrives. It returns the pid once known
// even when the stream then fails, so that the caller can still end the
// command. With onStart, the command's stdin is kept open for input
// (sendInput, closeStdin), and onStart is called with its pid once it has
// started; without, its stdin is closed.
func (e *envd) start(ctx context.Context, cfg processConfig, tag string, onStart func(pid uint32), stdout, stderr io.Writer) (started, error) {
	const op = "process.Process/Start"
	var st started
	msg, err := json.Marshal(startRequest{Process: cfg, Tag: tag, Stdin: onStart != nil})
	if err != nil {
		return st, fmt.Errorf("e2b: %s: %w", op, err)
	}
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/process.Process/Start", bytes.NewReader(frame))
	if err != nil {
		return st, fmt.Errorf("e2b: %s: %w", op, err)
	}
	e.header(req)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Keepalive-Ping-Interval", keepalivePingSeconds)
	resp, err := e.client.Do(req)
	if err != nil {
		return st, fmt.Errorf("e2b: %s in sandbox %s: %w", op, e.sandboxID, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, readAPIError(op+" in sandbox "+e.sandboxID, resp)
	}
	st, err = readEvents(bufio.NewReader(resp.Body), onStart, stdout, stderr)
	if err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			apiErr.Op = op + " in sandbox " + e.sandboxID
			return st, apiErr
		}
		return st, fmt.Errorf("e2b: %s in sandbox %s: %w", op, e.sandboxID, err)
	}
	return st, nil
}

// readEvents reads a process.Process/Start answer: Connect envelopes of
// process events up to the end-of-stream message, copying output as it
// arrives. It returns the pid once known even when the stream then fails.
func readEvents(r io.Reader, onStart func(uint32), stdout, stderr io.Writer) (started, error) {
	var st started
	for {
		flags, payload, err := readFrame(r)
		if err != nil {
			return st, err
		}
		if flags&0x02 != 0 { // end of stream
			var end struct {
				Error *connectError `json:"error"`
			}
			if err := json.Unmarshal(payload, &end); err != nil {
				return st, fmt.Errorf("unreadable end of stream: %w", err)
			}
			if end.Error != nil {
				return st, &APIError{Code: end.Error.Code, Message: end.Error.Message}
			}
			if st.end == nil {
				return st, errors.New("the stream ended without the command's end")
			}
			return st, nil
		}
		var m struct {
			Event processEvent `json:"event"`
		}
		if err := json.Unmarshal(payload, &m); err != nil {
			return st, fmt.Errorf("unreadable event: %w", err)
		}
		ev := m.Event
		switch {
		case ev.Start != nil:
			st.pid = ev.Start.Pid
			if onStart != nil {
				onStart(st.pid)
			}
		case ev.Data != nil:
			if err := writeAll(stdout, ev.Data.Stdout); err != nil {
				return st, fmt.Errorf("write stdout: %w", err)
			}
			if err := writeAll(stderr, ev.Data.Stderr); err != nil {
				return st, fmt.Errorf("write stderr: %w", err)
			}
			if err := writeAll(stdout, ev.Data.Pty); err != nil {
				return st, fmt.Errorf("write stdout: %w", err)
			}
		case ev.End != nil:
			st.end = ev.End
		}
	}
}

func writeAll(w io.Writer, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := w.Write(b)
	return err
}

// readFrame reads one Connect envelope: a flags byte, a big-endian length
// and that many bytes of JSON.
func readFrame(r io.Reader) (flags byte, payload []byte, err error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, nil, errors.New("the stream ended without an end-of-stream message")
		}
		return 0, nil, err
	}
	if head[0]&0x01 != 0 {
		return 0, nil, errors.New("compressed message, but no compression was asked for")
	}
	n := binary.BigEndian.Uint32(head[1:])
	if n > maxFrame {
		return 0, nil, fmt.Errorf("message of %d bytes, more than %d", n, maxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("truncated message: %w", err)
	}
	return head[0], payload, nil
}

// unary calls a unary Connect method with JSON.
func (e *envd) unary(ctx context.Context, method string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("e2b: %s: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.base+"/"+method, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("e2b: %s: %w", method, err)
	}
	e.header(req)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	resp, err := e.client.Do(req)
	if err != nil {
		return fmt.Errorf("e2b: %s in sandbox %s: %w: %w", method, e.sandboxID, provider.ErrTransient, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAPIError(method+" in sandbox "+e.sandboxID, resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		return fmt.Errorf("e2b: %s in sandbox %s: unreadable answer: %w", method, e.sandboxID, err)
	}
	return nil
}

// kill sends SIGKILL to the process sel selects; one that is gone is
// killed.
func (e *envd) kill(ctx context.Context, sel processSelector) error {
	err := e.unary(ctx, "process.Process/SendSignal", map[string]any{"process": sel, "signal": "SIGNAL_SIGKILL"}, &struct{}{})
	if errors.Is(err, provider.ErrNotFound) {
		return nil
	}
	return err
}

// sendInput writes p to the stdin of process pid
// (process.Process/SendInput; envd 0.3.0 and later).
func (e *envd) sendInput(ctx context.Context, pid uint32, p []byte) error {
	return e.unary(ctx, "process.Process/SendInput", map[string]any{
		"process": processSelector{Pid: pid}, "input": map[string][]byte{"stdin": p},
	}, &struct{}{})
}

// closeStdin closes the stdin of process pid, which then reads end of file
// (process.Process/CloseStdin; envd 0.5.2 and later).
func (e *envd) closeStdin(ctx context.Context, pid uint32) error {
	return e.unary(ctx, "process.Process/CloseStdin", map[string]any{"process": processSelector{Pid: pid}}, &struct{}{})
}

// pidOf returns the pid of the running process tagged tag, or 0.
func (e *envd) pidOf(ctx context.Context, tag string) (uint32, error) {
	var out struct {
		Processes []struct {
			Pid uint32 `json:"pid"`
			Tag string `json:"tag"`
		} `json:"processes"`
	}
	if err := e.unary(ctx, "process.Process/List", struct{}{}, &out); err != nil {
		return 0, err
	}
	for _, p := range out.Processes {
		if p.Tag == tag {
			return p.Pid, nil
		}
	}
	return 0, nil
}

func (e *envd) filesURL(p string) string {
	q := url.Values{"path": {p}}
	if e.user != "" {
		q.Set("username", e.user)
	}
	return e.base + "/files?" + q.Encode()
}

// upload writes body to p (creating its parents) as a multipart form,
// which every envd version takes, streaming it.
func (e *envd) upload(ctx context.Context, p string, body io.Reader) error {
	op := "upload " + p
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.filesURL(p), pr)
	if err != nil {
		return fmt.Errorf("e2b: %s: %w", op, err)
	}
	e.header(req)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	done := make(chan error, 1)
	go func() {
		part, err := mw.CreateFormFile("file", "file")
		if err == nil {
			_, err = io.Copy(part, body)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
		done <- err
	}()
	resp, err := e.client.Do(req)
	pr.CloseWithError(errors.New("request ended")) // ends the writer if the request did not read it all
	werr := <-done
	if err != nil {
		return fmt.Errorf("e2b: %s in sandbox %s: %w", op, e.sandboxID, errors.Join(err, werr))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return readAPIError(op+" in sandbox "+e.sandboxID, resp)
	}
	if werr != nil {
		return fmt.Errorf("e2b: %s: read the file: %w", op, werr)
	}
	return nil
}

// download opens p for reading.
func (e *envd) download(ctx context.Context, p string) (io.ReadCloser, error) {
	op := "download " + p
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.filesURL(p), nil)
	if err != nil {
		return nil, fmt.Errorf("e2b: %s: %w", op, err)
	}
	e.header(req)
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2b: %s in sandbox %s: %w", op, e.sandboxID, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readAPIError(op+" in sandbox "+e.sandboxID, resp)
	}
	return resp.Body, nil
}
