//go:build unix

package opensandbox_test

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// fakeOpenSandbox is a local stand-in for an OpenSandbox server, written
// from the published API descriptions in github.com/alibaba/OpenSandbox at
// commit 4db3a993c6a7c5c6e0c7cbb202e307fe9582762f:
//
//   - specs/sandbox-lifecycle.yml: the lifecycle API under /v1 (header
//     OPEN-SANDBOX-API-KEY; ErrorResponse {code, message}; POST /sandboxes
//     answering 202 with state Pending, Running once polled; GET /sandboxes
//     with the metadata filter "k=v&k2=v2" URL-encoded, state, page and
//     pageSize (at most 200, the server's limit) and PaginationInfo;
//     GET/DELETE /sandboxes/{id}; POST .../renew-expiration with an
//     absolute expiresAt in the future and after the current one;
//     GET .../endpoints/{port} with use_server_proxy, answering an endpoint
//     without a scheme and the headers to send); metadata keys and values
//     checked by the Kubernetes label rules the spec states; a timeout of
//     at least 60 s and at most the server's max_sandbox_timeout_seconds.
//   - specs/execd-api.yaml: execd (header X-EXECD-ACCESS-TOKEN): GET /ping,
//     POST /command streaming ServerStreamEvent frames (init with the
//     command id, stdout, stderr, then error {ename, evalue = the exit
//     code} or execution_complete), DELETE /command?id=, POST
//     /files/upload (multipart metadata part, then the file part, both
//     form files), GET /files/download, POST /directories (mode as octal
//     digits).
//
// Where the spec is silent the fake follows execd's own source in the same
// commit: output is reported a line at a time without its line end, an
// empty line as "\n", an unfinished last line flushed when the command
// ends (components/execd/pkg/runtime/command_common.go); each event is a
// JSON line followed by a blank line (pkg/web/controller/sse.go); the
// command runs with sh -c (bash when present) in a process group of its
// own, killed (SIGKILL) when interrupted or when the client goes away; a
// shell killed by a signal reports evalue -1 and "signal: NAME"
// (pkg/runtime/command.go).
//
// Commands really run, with os/exec; the sandboxes' filesystem is the real
// one, confined to a temporary root which they share, and whose work
// directory is emptied when the last sandbox ends. A sandbox whose expiration has passed
// on the fake clock is terminated (its commands killed) when the fake next
// looks at it. execd is reached directly at <execd server>/sandboxes/<id>/
// port/44772 with a per-sandbox token, or through the lifecycle server's
// proxy at /sandboxes/<id>/proxy/44772, which needs no API key (as the
// server's auth middleware exempts it).
type fakeOpenSandbox struct {
	t     *testing.T
	key   string
	root  string
	clock clockwork.Clock
	api   *httptest.Server
	execd *httptest.Server

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	next      int
	faults    []fakeFault
	// maxTimeout is the server's max_sandbox_timeout_seconds (0: none).
	maxTimeout time.Duration
	// pendingGets is how many GETs a new sandbox answers Pending first;
	// startState is what it then becomes ("Running" when empty).
	pendingGets int
	startState  string
	// requests counts requests by operation.
	requests map[string]int
	// leaked records execd requests that carried the API key.
	leaked int
	procs  sync.WaitGroup
}

type fakeSandbox struct {
	id, token  string
	image      string
	state      string
	pending    int
	metadata   map[string]string
	timeout    int64
	resources  map[string]string
	entrypoint []string
	createdAt  time.Time
	expiresAt  time.Time
	cmds       map[string]*fakeCmd
	// gone is closed when the sandbox is terminated: its execd is gone
	// with it, and its commands' streams break off.
	gone chan struct{}
}

type fakeCmd struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// fakeFault makes one operation of the fake fail: op is "create", "list",
// "get", "delete", "renew", "endpoint", "ping", "command", "interrupt",
// "upload", "download" or "mkdir".
type fakeFault struct {
	op string
	// status is the HTTP status answered (500 when zero).
	status int
	// retryAfter, if set, is sent as the Retry-After header.
	retryAfter string
	// after lets the operation happen before the answer is lost (the
	// connection breaks).
	after bool
	// hang holds the answer until the client gives up; onHang, if set, is
	// called when the hang starts.
	hang   bool
	onHang func()
	// skip lets that many calls pass first; times limits how often it
	// fires (0: always).
	skip, times int
}

func newFake(t *testing.T) *fakeOpenSandbox {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err == nil {
		err = os.MkdirAll(filepath.Join(root, "home"), 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeOpenSandbox{
		t: t, key: "osb_test_key", root: root, sandboxes: map[string]*fakeSandbox{}, requests: map[string]int{},
		clock:      clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)),
		maxTimeout: 24 * time.Hour,
	}
	api := http.NewServeMux()
	api.HandleFunc("POST /v1/sandboxes", f.auth(f.handleCreate))
	api.HandleFunc("GET /v1/sandboxes", f.auth(f.handleList))
	api.HandleFunc("GET /v1/sandboxes/{id}", f.auth(f.handleGet))
	api.HandleFunc("DELETE /v1/sandboxes/{id}", f.auth(f.handleDelete))
	api.HandleFunc("POST /v1/sandboxes/{id}/renew-expiration", f.auth(f.handleRenew))
	api.HandleFunc("GET /v1/sandboxes/{id}/endpoints/{port}", f.auth(f.handleEndpoint))
	api.Handle("/sandboxes/{id}/proxy/44772/", f.execdHandler("proxy"))
	f.api = httptest.NewServer(api)
	execd := http.NewServeMux()
	execd.Handle("/sandboxes/{id}/port/44772/", f.execdHandler("port"))
	f.execd = httptest.NewServer(execd)
	t.Cleanup(f.close)
	return f
}

// close terminates every sandbox, waits for their commands and stops the
// servers.
func (f *fakeOpenSandbox) close() {
	f.mu.Lock()
	for _, sb := range f.sandboxes {
		f.terminateLocked(sb, "fake_closed")
	}
	f.mu.Unlock()
	f.procs.Wait()
	f.api.Close()
	f.execd.Close()
}

// client is an HTTP client for the fake's servers.
func (f *fakeOpenSandbox) client() *http.Client { return &http.Client{Timeout: 30 * time.Second} }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers the ErrorResponse schema.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

func (f *fakeOpenSandbox) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("OPEN-SANDBOX-API-KEY") {
		case f.key:
			h(w, r)
		case "":
			writeError(w, http.StatusUnauthorized, "MISSING_API_KEY", "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.")
		default:
			writeError(w, http.StatusUnauthorized, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again.")
		}
	}
}

// fault counts the operation and returns the fault to inject, if any.
func (f *fakeOpenSandbox) fault(op string) (fakeFault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests[op]++
	for i := range f.faults {
		ft := &f.faults[i]
		if ft.op != op {
			continue
		}
		if ft.skip > 0 {
			ft.skip--
			continue
		}
		if ft.times < 0 {
			continue
		}
		if ft.times > 0 {
			ft.times--
			if ft.times == 0 {
				ft.times = -1
			}
		}
		return *ft, true
	}
	return fakeFault{}, false
}

func (f *fakeOpenSandbox) addFault(ft fakeFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, ft)
}

func (f *fakeOpenSandbox) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[op]
}

// inject runs do with the fault of op, if any: an answer lost after do, a
// refusal before it, or a hang until the client gives up.
func (f *fakeOpenSandbox) inject(op string, w http.ResponseWriter, r *http.Request, do func()) {
	ft, ok := f.fault(op)
	if !ok {
		do()
		return
	}
	if ft.after && !ft.hang {
		do()
		panic(http.ErrAbortHandler) // the answer is lost
	}
	if ft.after {
		do()
	}
	if ft.hang {
		if ft.onHang != nil {
			ft.onHang()
		}
		<-r.Context().Done()
		return
	}
	status := ft.status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if ft.retryAfter != "" {
		w.Header().Set("Retry-After", ft.retryAfter)
	}
	writeError(w, status, "INJECTED", fmt.Sprintf("injected %d on %s", status, op))
}

// reapLocked terminates the sandboxes whose expiration has passed.
func (f *fakeOpenSandbox) reapLocked() {
	now := f.clock.Now()
	for _, sb := range f.sandboxes {
		if sb.state != "Terminated" && !sb.expiresAt.IsZero() && !now.Before(sb.expiresAt) {
			f.terminateLocked(sb, "ttl_expiry")
		}
	}
}

// reap terminates the sandboxes whose expiration has passed now.
func (f *fakeOpenSandbox) reap() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reapLocked()
}

func (f *fakeOpenSandbox) terminateLocked(sb *fakeSandbox, _ string) { // the reason is for the reader
	sb.state = "Terminated"
	if sb.gone != nil {
		close(sb.gone)
		sb.gone = nil
	}
	for _, c := range sb.cmds {
		killGroup(c)
	}
	delete(f.sandboxes, sb.id)
	if len(f.sandboxes) == 0 { // the sandboxes share the root: its work goes with the last
		_ = os.RemoveAll(filepath.Join(f.root, "work"))
	}
}

func killGroup(c *fakeCmd) {
	if c.cmd.Process != nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	}
}

var (
	labelName  = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelValue = regexp.MustCompile(`^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$`)
)

func (f *fakeOpenSandbox) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Image *struct {
			URI string `json:"uri"`
		} `json:"image"`
		Timeout        *int64            `json:"timeout"`
		ResourceLimits map[string]string `json:"resourceLimits"`
		Metadata       map[string]string `json:"metadata"`
		Entrypoint     []string          `json:"entrypoint"`
		Platform       *struct {
			OS   string `json:"os"`
			Arch string `json:"arch"`
		} `json:"platform"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", err.Error())
		return
	}
	switch {
	case req.Image == nil || req.Image.URI == "":
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "exactly one of image or snapshotId is required")
		return
	case len(req.Entrypoint) == 0:
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "entrypoint is required with image")
		return
	case req.ResourceLimits == nil:
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "resourceLimits is required")
		return
	case req.Timeout != nil && *req.Timeout < 60:
		writeError(w, http.StatusBadRequest, "INVALID_PARAMETER", "timeout must be at least 60")
		return
	case req.Timeout != nil && f.maxTimeout > 0 && time.Duration(*req.Timeout)*time.Second > f.maxTimeout:
		writeError(w, http.StatusBadRequest, "INVALID_PARAMETER",
			fmt.Sprintf("Sandbox timeout %ds exceeds configured maximum of %ds.", *req.Timeout, int64(f.maxTimeout/time.Second)))
		return
	case req.Platform != nil && (!slices.Contains([]string{"linux", "windows"}, req.Platform.OS) || !slices.Contains([]string{"amd64", "arm64"}, req.Platform.Arch)):
		writeError(w, http.StatusBadRequest, "INVALID_PARAMETER", "bad platform")
		return
	}
	for k, v := range req.Metadata {
		if strings.HasPrefix(k, "opensandbox.io/") || !labelName.MatchString(k) || len(k) > 63 || !labelValue.MatchString(v) || len(v) > 63 {
			writeError(w, http.StatusBadRequest, "INVALID_METADATA_LABEL", fmt.Sprintf("Metadata %q=%q is invalid", k, v))
			return
		}
	}
	f.inject("create", w, r, func() {
		f.mu.Lock()
		f.next++
		now := f.clock.Now().UTC().Truncate(time.Second)
		sb := &fakeSandbox{
			id: fmt.Sprintf("sbx-%04d", f.next), token: fmt.Sprintf("token-%d", f.next), image: req.Image.URI,
			state: "Pending", pending: f.pendingGets, metadata: req.Metadata, resources: req.ResourceLimits,
			entrypoint: req.Entrypoint, createdAt: now, cmds: map[string]*fakeCmd{}, gone: make(chan struct{}),
		}
		if sb.metadata == nil {
			sb.metadata = map[string]string{}
		}
		if req.Timeout != nil {
			sb.timeout = *req.Timeout
			sb.expiresAt = now.Add(time.Duration(*req.Timeout) * time.Second)
		}
		f.sandboxes[sb.id] = sb
		out := f.sandboxJSONLocked(sb)
		f.mu.Unlock()
		w.Header().Set("Location", "/v1/sandboxes/"+sb.id)
		writeJSON(w, http.StatusAccepted, out)
	})
}

func (f *fakeOpenSandbox) sandboxJSONLocked(sb *fakeSandbox) map[string]any {
	m := map[string]any{
		"id":         sb.id,
		"status":     map[string]string{"state": sb.state, "reason": strings.ToUpper(sb.state)},
		"metadata":   maps.Clone(sb.metadata),
		"createdAt":  sb.createdAt.Format(time.RFC3339),
		"entrypoint": sb.entrypoint,
		"image":      map[string]string{"uri": sb.image},
	}
	if !sb.expiresAt.IsZero() {
		m["expiresAt"] = sb.expiresAt.Format(time.RFC3339)
	}
	return m
}

func (f *fakeOpenSandbox) handleList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter := map[string]string{}
	if m := q.Get("metadata"); m != "" {
		vals, err := url.ParseQuery(m)
		if err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_METADATA_FORMAT", "Invalid metadata format: "+err.Error())
			return
		}
		for k, v := range vals {
			filter[k] = v[len(v)-1]
		}
	}
	page, pageSize := 1, 20
	for _, p := range []struct {
		key      string
		n        *int
		min, max int
	}{{"page", &page, 1, 1 << 30}, {"pageSize", &pageSize, 1, 200}} {
		if v := q.Get(p.key); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < p.min || n > p.max {
				writeError(w, http.StatusBadRequest, "INVALID_PARAMETER", fmt.Sprintf("%s=%q is out of range", p.key, v))
				return
			}
			*p.n = n
		}
	}
	f.inject("list", w, r, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.reapLocked()
		var all []*fakeSandbox
		for _, sb := range f.sandboxes {
			match := len(q["state"]) == 0 || slices.Contains(q["state"], sb.state)
			for k, v := range filter {
				match = match && sb.metadata[k] == v
			}
			if match {
				all = append(all, sb)
			}
		}
		slices.SortFunc(all, func(a, b *fakeSandbox) int { return strings.Compare(a.id, b.id) })
		items := []map[string]any{}
		lo := min((page-1)*pageSize, len(all))
		hi := min(lo+pageSize, len(all))
		for _, sb := range all[lo:hi] {
			items = append(items, f.sandboxJSONLocked(sb))
		}
		pages := (len(all) + pageSize - 1) / pageSize
		writeJSON(w, http.StatusOK, map[string]any{"items": items, "pagination": map[string]any{
			"page": page, "pageSize": pageSize, "totalItems": len(all), "totalPages": pages, "hasNextPage": page < pages,
		}})
	})
}

// sandbox returns the live sandbox named in the path, answering 404 when
// there is none.
func (f *fakeOpenSandbox) sandbox(w http.ResponseWriter, r *http.Request) (*fakeSandbox, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reapLocked()
	sb := f.sandboxes[r.PathValue("id")]
	if sb == nil {
		writeError(w, http.StatusNotFound, "SANDBOX_NOT_FOUND", "sandbox "+r.PathValue("id")+" not found")
		return nil, false
	}
	return sb, true
}

func (f *fakeOpenSandbox) handleGet(w http.ResponseWriter, r *http.Request) {
	f.inject("get", w, r, func() {
		sb, ok := f.sandbox(w, r)
		if !ok {
			return
		}
		f.mu.Lock()
		if sb.state == "Pending" {
			if sb.pending <= 0 {
				sb.state = cmp.Or(f.startState, "Running")
			}
			sb.pending--
		}
		out := f.sandboxJSONLocked(sb)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	})
}

func (f *fakeOpenSandbox) handleDelete(w http.ResponseWriter, r *http.Request) {
	f.inject("delete", w, r, func() {
		sb, ok := f.sandbox(w, r)
		if !ok {
			return
		}
		f.mu.Lock()
		f.terminateLocked(sb, "user_delete")
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
}

func (f *fakeOpenSandbox) handleRenew(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ExpiresAt time.Time `json:"expiresAt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ExpiresAt.IsZero() {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST", "expiresAt (RFC 3339) is required")
		return
	}
	f.inject("renew", w, r, func() {
		sb, ok := f.sandbox(w, r)
		if !ok {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if !req.ExpiresAt.After(f.clock.Now()) || (!sb.expiresAt.IsZero() && !req.ExpiresAt.After(sb.expiresAt)) {
			writeError(w, http.StatusBadRequest, "INVALID_EXPIRATION", "expiresAt must be in the future and after the current expiresAt")
			return
		}
		sb.expiresAt = req.ExpiresAt.UTC()
		writeJSON(w, http.StatusOK, map[string]string{"expiresAt": sb.expiresAt.Format(time.RFC3339)})
	})
}

func (f *fakeOpenSandbox) handleEndpoint(w http.ResponseWriter, r *http.Request) {
	f.inject("endpoint", w, r, func() {
		sb, ok := f.sandbox(w, r)
		if !ok {
			return
		}
		if r.PathValue("port") != "44772" {
			writeError(w, http.StatusNotFound, "ENDPOINT_NOT_FOUND", "nothing listens on port "+r.PathValue("port"))
			return
		}
		if r.URL.Query().Get("use_server_proxy") == "true" {
			host := strings.TrimPrefix(f.api.URL, "http://")
			writeJSON(w, http.StatusOK, map[string]any{"endpoint": host + "/sandboxes/" + sb.id + "/proxy/44772"})
			return
		}
		host := strings.TrimPrefix(f.execd.URL, "http://")
		writeJSON(w, http.StatusOK, map[string]any{
			"endpoint": host + "/sandboxes/" + sb.id + "/port/44772",
			"headers":  map[string]string{"X-EXECD-ACCESS-TOKEN": sb.token},
		})
	})
}

// execdHandler serves execd for the sandbox named in the path; via is
// "port" (direct, the token required) or "proxy".
func (f *fakeOpenSandbox) execdHandler(via string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("OPEN-SANDBOX-API-KEY") != "" {
			f.mu.Lock()
			f.leaked++
			f.mu.Unlock()
		}
		sb, ok := f.sandbox(w, r)
		if !ok {
			return
		}
		if via == "port" && r.Header.Get("X-EXECD-ACCESS-TOKEN") != sb.token {
			writeError(w, http.StatusUnauthorized, "UNAUTHORIZED", "missing or wrong X-EXECD-ACCESS-TOKEN")
			return
		}
		if sb.state != "Running" {
			writeError(w, http.StatusBadGateway, "SANDBOX_NOT_RUNNING", "sandbox is "+sb.state)
			return
		}
		rest := strings.TrimPrefix(r.URL.Path, "/sandboxes/"+sb.id+"/"+via+"/44772")
		switch {
		case r.Method == http.MethodGet && rest == "/ping":
			f.inject("ping", w, r, func() { w.WriteHeader(http.StatusOK) })
		case r.Method == http.MethodPost && rest == "/command":
			f.handleCommand(w, r, sb)
		case r.Method == http.MethodDelete && rest == "/command":
			f.inject("interrupt", w, r, func() { f.handleInterrupt(w, r, sb) })
		case r.Method == http.MethodPost && rest == "/files/upload":
			f.inject("upload", w, r, func() { f.handleUpload(w, r) })
		case r.Method == http.MethodGet && rest == "/files/download":
			f.inject("download", w, r, func() { f.handleDownload(w, r) })
		case r.Method == http.MethodPost && rest == "/directories":
			f.inject("mkdir", w, r, func() { f.handleMkdir(w, r) })
		default:
			writeError(w, http.StatusNotFound, "NOT_FOUND", r.Method+" "+rest)
		}
	})
}

// inRoot resolves a sandbox path, which must lie in the fake's root.
func (f *fakeOpenSandbox) inRoot(w http.ResponseWriter, p string) (string, bool) {
	if !filepath.IsAbs(p) || (p != f.root && !strings.HasPrefix(filepath.Clean(p), f.root+"/")) {
		writeError(w, http.StatusBadRequest, "INVALID_PATH", fmt.Sprintf("path %q is outside the fake's root", p))
		return "", false
	}
	return filepath.Clean(p), true
}

func parseMode(n int) (os.FileMode, error) {
	m, err := strconv.ParseUint(strconv.Itoa(n), 8, 32)
	return os.FileMode(m), err
}

func (f *fakeOpenSandbox) handleMkdir(w http.ResponseWriter, r *http.Request) {
	var req map[string]struct {
		Mode int `json:"mode"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", err.Error())
		return
	}
	for p, perm := range req {
		dir, ok := f.inRoot(w, p)
		if !ok {
			return
		}
		mode, err := parseMode(perm.Mode)
		if err == nil {
			err = os.MkdirAll(dir, mode)
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeOpenSandbox) handleUpload(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(1 << 20); err != nil {
		writeError(w, http.StatusBadRequest, "INVALID_FILE", "multipart form is empty")
		return
	}
	metas, files := r.MultipartForm.File["metadata"], r.MultipartForm.File["file"]
	if len(metas) == 0 || len(files) == 0 || len(metas) != len(files) {
		writeError(w, http.StatusBadRequest, "INVALID_FILE", "metadata and file parts must come in pairs (both form files)")
		return
	}
	for i := range metas {
		mf, err := metas[i].Open()
		if err != nil {
			writeError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", err.Error())
			return
		}
		var meta struct {
			Path string `json:"path"`
			Mode int    `json:"mode"`
		}
		err = json.NewDecoder(mf).Decode(&meta)
		mf.Close()
		if err != nil || meta.Path == "" {
			writeError(w, http.StatusBadRequest, "INVALID_FILE_METADATA", fmt.Sprintf("invalid metadata format: %v", err))
			return
		}
		p, ok := f.inRoot(w, meta.Path)
		if !ok {
			return
		}
		if err := f.writeUploaded(p, meta.Mode, files[i]); err != nil {
			writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeOpenSandbox) writeUploaded(p string, mode int, fh *multipart.FileHeader) error {
	src, err := fh.Open()
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
		return err
	}
	dst, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	if err := dst.Close(); err != nil {
		return err
	}
	if mode != 0 {
		m, err := parseMode(mode)
		if err != nil {
			return err
		}
		return os.Chmod(p, m)
	}
	return nil
}

func (f *fakeOpenSandbox) handleDownload(w http.ResponseWriter, r *http.Request) {
	p, ok := f.inRoot(w, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	file, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		writeError(w, http.StatusNotFound, "FILE_NOT_FOUND", "file not found")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, "RUNTIME_ERROR", err.Error())
		return
	}
	defer file.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": filepath.Base(p)}))
	_, _ = io.Copy(w, file)
}

func (f *fakeOpenSandbox) handleInterrupt(w http.ResponseWriter, r *http.Request, sb *fakeSandbox) {
	id := r.URL.Query().Get("id")
	f.mu.Lock()
	c := sb.cmds[id]
	f.mu.Unlock()
	if id == "" {
		writeError(w, http.StatusBadRequest, "MISSING_QUERY", "missing id")
		return
	}
	if c != nil {
		killGroup(c)
	}
	w.WriteHeader(http.StatusOK)
}

// eventWriter writes execd's stream events: a JSON line and a blank line
// each, flushed.
type eventWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
}

func (e *eventWriter) send(ev map[string]any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev["timestamp"] = time.Now().UnixMilli()
	b, _ := json.Marshal(ev)
	_, _ = e.w.Write(append(b, '\n', '\n'))
	if fl, ok := e.w.(http.Flusher); ok {
		fl.Flush()
	}
}

// lineSplitter reports written output as execd does: a line at a time
// without its end ("\r", "\n" or "\r\n"), an empty line as "\n", the
// unfinished rest at flush.
type lineSplitter struct {
	buf  []byte
	cr   bool
	emit func(string)
}

func (l *lineSplitter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b == '\n' || b == '\r' {
			switch {
			case len(l.buf) > 0:
				l.emit(string(l.buf))
				l.buf = l.buf[:0]
			case b == '\n' && l.cr:
			default:
				l.emit("\n")
			}
			l.cr = b == '\r'
			continue
		}
		l.cr = false
		l.buf = append(l.buf, b)
	}
	return len(p), nil
}

func (l *lineSplitter) flush() {
	if len(l.buf) > 0 {
		l.emit(string(l.buf))
		l.buf = nil
	}
}

func shell() string {
	if _, err := exec.LookPath("bash"); err == nil {
		return "bash"
	}
	return "sh"
}

func (f *fakeOpenSandbox) handleCommand(w http.ResponseWriter, r *http.Request, sb *fakeSandbox) {
	var req struct {
		Command string            `json:"command"`
		Cwd     string            `json:"cwd"`
		Envs    map[string]string `json:"envs"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		writeError(w, http.StatusBadRequest, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format")
		return
	}
	if ft, ok := f.fault("command"); ok {
		status := ft.status
		if status == 0 {
			status = http.StatusInternalServerError
		}
		writeError(w, status, "INJECTED", "injected failure of command")
		return
	}
	ev := &eventWriter{w: w}
	stdout := &lineSplitter{emit: func(s string) { ev.send(map[string]any{"type": "stdout", "text": s}) }}
	stderr := &lineSplitter{emit: func(s string) { ev.send(map[string]any{"type": "stderr", "text": s}) }}
	cmd := exec.Command(shell(), "-c", req.Command)
	cmd.Dir = req.Cwd
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(f.root, "home"))
	for k, v := range req.Envs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second // a background child holding the output open
	w.Header().Set("Content-Type", "text/event-stream")
	f.mu.Lock()
	f.next++
	id := fmt.Sprintf("cmd-%d", f.next)
	f.mu.Unlock()
	// execd reports init once the command has started, before its first
	// output (which it polls for every 100 ms); the fake's output comes
	// through pipes at once, so init goes first.
	ev.send(map[string]any{"type": "init", "text": id})
	f.mu.Lock()
	gone := sb.gone
	err := cmd.Start()
	c := &fakeCmd{cmd: cmd, done: make(chan struct{})}
	if err == nil {
		sb.cmds[id] = c
		f.procs.Add(1)
	}
	f.mu.Unlock()
	if err != nil {
		ev.send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": err.Error(), "traceback": []string{err.Error()}}})
		return
	}
	defer f.procs.Done()
	go func() { // the client going away kills the command, as in execd
		select {
		case <-r.Context().Done():
			killGroup(c)
		case <-c.done:
		}
	}()
	werr := cmd.Wait()
	close(c.done)
	f.mu.Lock()
	delete(sb.cmds, id)
	f.mu.Unlock()
	select {
	case <-gone: // the sandbox went with its execd: no end event
		panic(http.ErrAbortHandler)
	default:
	}
	stdout.flush()
	stderr.flush()
	var exitErr *exec.ExitError
	switch {
	case werr == nil:
		ev.send(map[string]any{"type": "execution_complete", "execution_time": 1})
	case errors.As(werr, &exitErr):
		ev.send(map[string]any{"type": "error", "error": map[string]any{
			"ename": "CommandExecError", "evalue": strconv.Itoa(exitErr.ExitCode()), "traceback": []string{werr.Error()},
		}})
	default:
		ev.send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": werr.Error(), "traceback": []string{werr.Error()}}})
	}
}

// sandboxIDs returns the IDs of the sandboxes that live now.
func (f *fakeOpenSandbox) sandboxIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reapLocked()
	var ids []string
	for id := range f.sandboxes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// expiresAt is the expiration of sandbox id.
func (f *fakeOpenSandbox) expiresAt(id string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		return sb.expiresAt
	}
	return time.Time{}
}

// metadata is the metadata of sandbox id.
func (f *fakeOpenSandbox) metadata(id string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		return maps.Clone(sb.metadata)
	}
	return nil
}

// setState puts sandbox id in state (e.g. Failed), as the server would.
func (f *fakeOpenSandbox) setState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		sb.state = state
	}
}

// plant adds a sandbox that crabbox did not make, with metadata.
func (f *fakeOpenSandbox) plant(metadata map[string]string, expires time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	sb := &fakeSandbox{
		id: fmt.Sprintf("sbx-%04d", f.next), token: "planted", image: "other", state: "Running", metadata: metadata,
		createdAt: f.clock.Now().UTC(), expiresAt: expires, cmds: map[string]*fakeCmd{}, entrypoint: []string{"tail"},
		gone: make(chan struct{}),
	}
	f.sandboxes[sb.id] = sb
	return sb.id
}

// terminate ends sandbox id, as its expiry or the server would.
func (f *fakeOpenSandbox) terminate(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sb := f.sandboxes[id]; sb != nil {
		f.terminateLocked(sb, "test")
	}
}
