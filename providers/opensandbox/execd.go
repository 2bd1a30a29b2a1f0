package opensandbox

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// execd is a client of one sandbox's execd (specs/execd-api.yaml).
type execd struct {
	sandboxID string
	base      string
	// headers are the ones the endpoint answer names (an access token
	// when the server secures endpoints); nothing else is sent.
	headers map[string]string
	client  *http.Client // without an overall timeout: ctx bounds calls
}

// newExecd makes the client of the endpoint ep, which may lack a scheme
// (the server answers "host:port/path"): then it has scheme's.
func newExecd(sandboxID string, ep endpointJSON, scheme string, client *http.Client) (*execd, error) {
	raw := strings.TrimRight(ep.Endpoint, "/")
	if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
		raw = scheme + "://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("opensandbox: sandbox %s: execd endpoint %q is not an http(s) URL", sandboxID, ep.Endpoint)
	}
	return &execd{sandboxID: sandboxID, base: raw, headers: ep.Headers, client: client}, nil
}

// request sends one request to execd and returns the response of a 2xx
// answer; anything else is an *APIError.
func (e *execd) request(ctx context.Context, op, method, path string, query url.Values, body io.Reader, contentType string) (*http.Response, error) {
	u := e.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("opensandbox: %s: %w", op, err)
	}
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("User-Agent", "crabbox")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("opensandbox: %s in sandbox %s: %w: %w", op, e.sandboxID, provider.ErrTransient, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readAPIError(op+" in sandbox "+e.sandboxID, resp)
	}
	return resp, nil
}

// simple sends a request whose answer body is not needed.
func (e *execd) simple(ctx context.Context, op, method, path string, query url.Values, in any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("opensandbox: %s: %w", op, err)
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := e.request(ctx, op, method, path, query, body, ct)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

func (e *execd) ping(ctx context.Context) error {
	return e.simple(ctx, "ping execd", http.MethodGet, "/ping", nil, nil)
}

// octal is a permission as the API writes it: the octal digits as a
// decimal number (0o755 is 755).
func octal(perm int64) int {
	n, _ := strconv.Atoi(strconv.FormatInt(perm&0o7777, 8))
	return n
}

// mkdir makes directory p and its parents (mkdir -p).
func (e *execd) mkdir(ctx context.Context, p string, perm int64) error {
	return e.simple(ctx, "make directory "+p, http.MethodPost, "/directories", nil, map[string]any{p: map[string]int{"mode": octal(perm)}})
}

// interrupt ends the command id (execd kills its process group).
func (e *execd) interrupt(ctx context.Context, id string) error {
	return e.simple(ctx, "interrupt command "+id, http.MethodDelete, "/command", url.Values{"id": {id}}, nil)
}

// upload writes body (size bytes) to p with permission perm: a multipart
// form of a metadata part (FileMetadata) followed by the file part.
func (e *execd) upload(ctx context.Context, p string, perm int64, body io.Reader) error {
	meta, err := json.Marshal(map[string]any{"path": p, "mode": octal(perm)})
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	written := make(chan error, 1)
	go func() {
		err := writeUpload(mw, meta, body)
		pw.CloseWithError(err)
		written <- err
	}()
	err = e.uploadBody(ctx, "upload "+p, pr, mw.FormDataContentType())
	pr.CloseWithError(errRequestEnded) // unblocks the writer if the request stopped reading
	if werr := <-written; werr != nil && !errors.Is(werr, errRequestEnded) {
		err = werr // the body was at fault, not execd
	}
	return err
}

// uploadBody posts a streamed upload body.
func (e *execd) uploadBody(ctx context.Context, op string, body io.Reader, contentType string) error {
	resp, err := e.request(ctx, op, http.MethodPost, "/files/upload", nil, body, contentType)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// errRequestEnded ends an upload whose request stopped reading its body.
var errRequestEnded = errors.New("the upload request ended")

func writeUpload(mw *multipart.Writer, meta []byte, body io.Reader) error {
	h := textproto.MIMEHeader{}
	// execd reads both parts as files of the form (form.File), so the
	// metadata part needs a file name too.
	h.Set("Content-Disposition", `form-data; name="metadata"; filename="metadata"`)
	h.Set("Content-Type", "application/json")
	w, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := w.Write(meta); err != nil {
		return err
	}
	h = textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="file"; filename="file"`)
	h.Set("Content-Type", "application/octet-stream")
	if w, err = mw.CreatePart(h); err != nil {
		return err
	}
	if _, err := io.Copy(w, body); err != nil {
		return fmt.Errorf("read the body: %w", err)
	}
	return mw.Close()
}

// download opens file p; the caller closes it.
func (e *execd) download(ctx context.Context, p string) (io.ReadCloser, error) {
	resp, err := e.request(ctx, "download "+p, http.MethodGet, "/files/download", url.Values{"path": {p}}, nil, "")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// runCommandRequest is the RunCommandRequest schema.
type runCommandRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Envs    map[string]string `json:"envs,omitempty"`
}

// streamEvent is the ServerStreamEvent schema.
type streamEvent struct {
	Type  string `json:"type"`
	Text  string `json:"text"`
	Error *struct {
		EName     string   `json:"ename"`
		EValue    string   `json:"evalue"`
		Traceback []string `json:"traceback"`
	} `json:"error"`
}

// commandEnd is how a command ended: its exit code, or why there is none.
type commandEnd struct {
	code int
	err  error
}

// startCommand posts the command and returns its event stream; the
// caller closes it.
func (e *execd) startCommand(ctx context.Context, req runCommandRequest) (io.ReadCloser, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := e.request(ctx, "run a command", http.MethodPost, "/command", nil, bytes.NewReader(b), "application/json")
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// readEvents reads a command's server-sent events, calling fn for each,
// until fn says the command ended or the stream does. execd writes each
// event as one JSON line followed by a blank line; "data:" lines of
// standard SSE are read as well.
func readEvents(r io.Reader, fn func(streamEvent) (done bool, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var data []string
	dispatch := func() (bool, error) {
		if len(data) == 0 {
			return false, nil
		}
		raw := strings.Join(data, "\n")
		data = data[:0]
		var ev streamEvent
		if err := json.Unmarshal([]byte(raw), &ev); err != nil {
			return false, fmt.Errorf("unreadable event %q: %w", truncate(raw, 200), err)
		}
		return fn(ev)
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if done, err := dispatch(); done || err != nil {
				return err
			}
		case strings.HasPrefix(line, ":"): // a comment
		case strings.HasPrefix(line, "{"):
			data = append(data, line)
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if done, err := dispatch(); done || err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
