//go:build unix

package tensorlake_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// fakeTensorlake is a local stand-in for Tensorlake, written from its
// published API reference, https://docs.tensorlake.ai/api-reference/v2
// (the OpenAPI excerpts on its pages: sandboxes/create, sandboxes/list,
// sandboxes/get, processes/run, processes/kill, sandbox-files/read and
// sandbox-files/write), with the field names of the sandbox models of
// Tensorlake's SDK (github.com/tensorlakeai/tensorlake,
// crates/cloud-sdk/src/sandboxes/models.rs and mod.rs at commit
// cab38389d0f457b9fc84f1b5819c74ad32d0da5c), never from crabbox's own
// requests:
//
//   - the control API on one server: POST /sandboxes (201 with sandbox_id,
//     status "pending"), GET /sandboxes (limit, cursor, direction; the
//     whole history, terminated sandboxes included, with next_cursor),
//     GET /sandboxes/{id} and DELETE /sandboxes/{id}, all with a bearer
//     API key; a sandbox is pending until it is first read, then running,
//     and terminated at its timeout_secs (on the fake clock) or when
//     deleted. A timeout_secs beyond the plan's maximum (1h, free) is
//     refused with 400, a name a live sandbox has with 409.
//   - the sandbox proxy on another, reached like the SDKs' explicit proxy
//     URL with the X-Tensorlake-Sandbox-Id header: POST
//     /api/v1/processes/run streams a start event (handle, pid,
//     started_at), output events (line, timestamp, stream) and an exit
//     event (exit_code, or signal) as SSE data frames; DELETE
//     /api/v1/processes/{pid} kills with SIGKILL; GET and PUT
//     /api/v1/files?path= read (200 octet-stream, 404 missing, 400 a
//     directory) and write (204, parents made) files, refusing a path
//     with ".." (403). Errors are {"error","code"}.
//
// Commands really run, with os/exec; the sandboxes' filesystem is the
// real one, limited to a temporary root which they share.
type fakeTensorlake struct {
	t     *testing.T
	key   string
	root  string
	clock clockwork.Clock
	api   *httptest.Server
	proxy *httptest.Server

	mu          sync.Mutex
	sandboxes   []*fakeSandbox // in creation order
	faults      []fakeFault
	pageSize    int
	pendingGets int // reads a new sandbox stays pending for
	maxLifetime time.Duration
	calls       map[string]int
	procs       sync.WaitGroup
}

type fakeSandbox struct {
	id, name    string
	status      string
	createdAt   time.Time
	timeoutSecs int64
	cpus        float64
	memoryMB    int64
	image       string
	reads       int
	procs       map[int]*exec.Cmd
}

// fakeFault makes one operation of the fake fail: op is "create", "list",
// "get", "delete", "run", "kill", "read" or "write".
type fakeFault struct {
	op string
	// status is the HTTP status answered (500 when zero).
	status int
	// retryAfter, if set, is the answer's Retry-After header.
	retryAfter string
	// after lets the operation happen before the answer fails.
	after bool
	// hang holds the answer until the client gives up; onHang, if set, is
	// called when the hang starts.
	hang   bool
	onHang func()
	// times limits how often it fires; 0 means always.
	times int
}

func newFake(t *testing.T) *fakeTensorlake {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err == nil {
		err = os.MkdirAll(filepath.Join(root, "home", "tl-user"), 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeTensorlake{
		t: t, key: "tl_apiKey_test", root: root, pageSize: 100, maxLifetime: time.Hour, calls: map[string]int{},
		clock: clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)),
	}
	api := http.NewServeMux()
	api.HandleFunc("POST /sandboxes", f.handleCreate)
	api.HandleFunc("GET /sandboxes", f.handleList)
	api.HandleFunc("GET /sandboxes/{id}", f.handleGet)
	api.HandleFunc("DELETE /sandboxes/{id}", f.handleDelete)
	f.api = httptest.NewServer(f.auth(api))
	proxy := http.NewServeMux()
	proxy.HandleFunc("POST /api/v1/processes/run", f.handleRun)
	proxy.HandleFunc("DELETE /api/v1/processes/{pid}", f.handleKill)
	proxy.HandleFunc("GET /api/v1/files", f.handleRead)
	proxy.HandleFunc("PUT /api/v1/files", f.handleWrite)
	f.proxy = httptest.NewServer(f.auth(proxy))
	t.Cleanup(f.close)
	return f
}

func (f *fakeTensorlake) close() {
	f.mu.Lock()
	for _, sb := range f.sandboxes {
		f.terminateLocked(sb)
	}
	f.mu.Unlock()
	f.procs.Wait()
	f.api.Close()
	f.proxy.Close()
}

func (f *fakeTensorlake) client() *http.Client { return f.api.Client() }

func (f *fakeTensorlake) fail(ft fakeFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, ft)
}

func (f *fakeTensorlake) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// inject counts op and runs it under its fault, if any; it reports
// whether the answer was taken over.
func (f *fakeTensorlake) inject(op string, w http.ResponseWriter, r *http.Request, do func()) bool {
	f.mu.Lock()
	f.calls[op]++
	var ft *fakeFault
	for i := range f.faults {
		if c := &f.faults[i]; c.op == op && c.times >= 0 {
			if c.times > 0 {
				if c.times--; c.times == 0 {
					c.times = -1
				}
			}
			cp := *c
			ft = &cp
			break
		}
	}
	f.mu.Unlock()
	if ft == nil {
		return false
	}
	if ft.after {
		do()
	}
	if ft.hang {
		if ft.onHang != nil {
			ft.onHang()
		}
		<-r.Context().Done()
		return true
	}
	status := ft.status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if ft.retryAfter != "" {
		w.Header().Set("Retry-After", ft.retryAfter)
	}
	apiError(w, status, "injected", "injected failure of %s", op)
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, code, format string, args ...any) {
	writeJSON(w, status, map[string]string{"error": fmt.Sprintf(format, args...), "code": code})
}

func (f *fakeTensorlake) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+f.key {
			apiError(w, http.StatusUnauthorized, "unauthorized", "invalid or missing credentials")
			return
		}
		f.mu.Lock()
		f.expireLocked()
		f.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// expireLocked terminates every sandbox whose timeout has passed.
func (f *fakeTensorlake) expireLocked() {
	now := f.clock.Now()
	for _, sb := range f.sandboxes {
		if sb.status != "terminated" && sb.timeoutSecs > 0 && !now.Before(sb.createdAt.Add(time.Duration(sb.timeoutSecs)*time.Second)) {
			f.terminateLocked(sb)
		}
	}
}

func (f *fakeTensorlake) terminateLocked(sb *fakeSandbox) {
	sb.status = "terminated"
	for pid := range sb.procs {
		syscall.Kill(-pid, syscall.SIGKILL)
	}
}

func (f *fakeTensorlake) byIDLocked(id string) *fakeSandbox {
	for _, sb := range f.sandboxes {
		if sb.id == id {
			return sb
		}
	}
	return nil
}

// live returns the fake's sandboxes that have not ended.
func (f *fakeTensorlake) live() []fakeSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
	var out []fakeSandbox
	for _, sb := range f.sandboxes {
		if sb.status != "terminated" {
			out = append(out, *sb)
		}
	}
	return out
}

// add makes a running sandbox directly, as another client would.
func (f *fakeTensorlake) add(name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := &fakeSandbox{id: newID(), name: name, status: "running", createdAt: f.clock.Now(), timeoutSecs: 600, cpus: 1, memoryMB: 512, procs: map[int]*exec.Cmd{}}
	f.sandboxes = append(f.sandboxes, sb)
	return sb.id
}

func newID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (f *fakeTensorlake) info(sb *fakeSandbox) map[string]any {
	m := map[string]any{
		"id": sb.id, "namespace": "default", "status": sb.status, "created_at": sb.createdAt.UnixMilli(),
		"resources":    map[string]any{"cpus": sb.cpus, "memory_mb": sb.memoryMB, "disk_mb": 10240},
		"timeout_secs": sb.timeoutSecs, "allow_unauthenticated_access": false,
		"sandbox_url": f.proxy.URL, "ingress_endpoint": f.proxy.URL,
	}
	if sb.name != "" {
		m["name"] = sb.name
	}
	if sb.image != "" {
		m["image"] = sb.image
	}
	if sb.status == "pending" {
		m["pending_reason"] = "scheduling"
	}
	return m
}

// ---- control API ----

func (f *fakeTensorlake) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name      *string `json:"name"`
		Image     *string `json:"image"`
		Resources *struct {
			CPUs     float64 `json:"cpus"`
			MemoryMB int64   `json:"memory_mb"`
			DiskMB   *int64  `json:"disk_mb"`
		} `json:"resources"`
		TimeoutSecs *int64          `json:"timeout_secs"`
		SecretNames []string        `json:"secret_names"`
		Entrypoint  []string        `json:"entrypoint"`
		Network     json.RawMessage `json:"network"`
		SnapshotID  *string         `json:"snapshot_id"`
	}
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "bad body: %v", err)
		return
	}
	if req.Resources == nil || req.Resources.CPUs <= 0 || req.Resources.MemoryMB <= 0 {
		apiError(w, http.StatusBadRequest, "invalid_request", "resources.cpus and resources.memory_mb must be positive")
		return
	}
	timeout := int64(0)
	if req.TimeoutSecs != nil {
		timeout = *req.TimeoutSecs
	}
	if timeout < 0 || time.Duration(timeout)*time.Second > f.maxLifetime {
		apiError(w, http.StatusBadRequest, "invalid_request", "timeout_secs %d is beyond your plan's maximum of %d", timeout, int64(f.maxLifetime/time.Second))
		return
	}
	if timeout == 0 { // 0 requests the plan's maximum
		timeout = int64(f.maxLifetime / time.Second)
	}
	sb := &fakeSandbox{id: newID(), status: "pending", createdAt: f.clock.Now(), timeoutSecs: timeout,
		cpus: req.Resources.CPUs, memoryMB: req.Resources.MemoryMB, procs: map[int]*exec.Cmd{}}
	if req.Name != nil {
		sb.name = *req.Name
	}
	if req.Image != nil {
		sb.image = *req.Image
	}
	create := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.sandboxes = append(f.sandboxes, sb)
	}
	if f.inject("create", w, r, create) {
		return
	}
	f.mu.Lock()
	for _, o := range f.sandboxes {
		if sb.name != "" && o.name == sb.name && o.status != "terminated" {
			f.mu.Unlock()
			apiError(w, http.StatusConflict, "conflict", "a sandbox named %s exists", sb.name)
			return
		}
	}
	f.mu.Unlock()
	create()
	writeJSON(w, http.StatusOK, map[string]any{"sandbox_id": sb.id, "status": "pending", "pending_reason": "scheduling"})
}

func (f *fakeTensorlake) handleList(w http.ResponseWriter, r *http.Request) {
	if f.inject("list", w, r, func() {}) {
		return
	}
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			apiError(w, http.StatusBadRequest, "invalid_request", "limit %q", v)
			return
		}
		limit = n
	}
	limit = min(limit, f.pageSize)
	start := 0
	if c := q.Get("cursor"); c != "" {
		if q.Get("direction") != "forward" {
			apiError(w, http.StatusBadRequest, "invalid_request", "direction %q", q.Get("direction"))
			return
		}
		b, err := base64.StdEncoding.DecodeString(c)
		if err == nil {
			start, err = strconv.Atoi(string(b))
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, "invalid_request", "cursor %q", c)
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var page []map[string]any
	end := min(start+limit, len(f.sandboxes))
	for _, sb := range f.sandboxes[min(start, end):end] {
		if q.Get("status") == "running" && sb.status != "running" {
			continue
		}
		page = append(page, f.info(sb))
	}
	ans := map[string]any{"sandboxes": page, "prev_cursor": nil, "next_cursor": nil}
	if page == nil {
		ans["sandboxes"] = []any{}
	}
	if end < len(f.sandboxes) {
		ans["next_cursor"] = base64.StdEncoding.EncodeToString([]byte(strconv.Itoa(end)))
	}
	writeJSON(w, http.StatusOK, ans)
}

func (f *fakeTensorlake) handleGet(w http.ResponseWriter, r *http.Request) {
	if f.inject("get", w, r, func() {}) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.byIDLocked(r.PathValue("id"))
	if sb == nil {
		apiError(w, http.StatusNotFound, "not_found", "sandbox %s not found", r.PathValue("id"))
		return
	}
	if sb.status == "pending" {
		if sb.reads++; sb.reads > f.pendingGets {
			sb.status = "running"
		}
	}
	writeJSON(w, http.StatusOK, f.info(sb))
}

func (f *fakeTensorlake) handleDelete(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	del := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if sb := f.byIDLocked(id); sb != nil {
			f.terminateLocked(sb)
		}
	}
	if f.inject("delete", w, r, del) {
		return
	}
	f.mu.Lock()
	sb := f.byIDLocked(id)
	f.mu.Unlock()
	if sb == nil {
		apiError(w, http.StatusNotFound, "not_found", "sandbox %s not found", id)
		return
	}
	del()
	w.WriteHeader(http.StatusOK)
}

// ---- sandbox proxy ----

// running returns the sandbox the request names, if it runs; otherwise
// it answers.
func (f *fakeTensorlake) running(w http.ResponseWriter, r *http.Request) *fakeSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb := f.byIDLocked(r.Header.Get("X-Tensorlake-Sandbox-Id"))
	if sb == nil || sb.status != "running" {
		apiError(w, http.StatusNotFound, "not_found", "no running sandbox %q", r.Header.Get("X-Tensorlake-Sandbox-Id"))
		return nil
	}
	return sb
}

// hostPath checks a sandbox path: relative paths are the home's, ".." is
// refused, and the fake keeps every path under its root.
func (f *fakeTensorlake) hostPath(w http.ResponseWriter, p string) (string, bool) {
	if p == "" {
		apiError(w, http.StatusBadRequest, "invalid_request", "path is required")
		return "", false
	}
	if strings.Contains(p, "..") {
		apiError(w, http.StatusForbidden, "forbidden", "path %q contains ..", p)
		return "", false
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(f.root, "home", "tl-user", p)
	}
	if !strings.HasPrefix(filepath.Clean(p)+"/", f.root+"/") {
		apiError(w, http.StatusForbidden, "forbidden", "the fake keeps to %s, not %q", f.root, p)
		return "", false
	}
	return p, true
}

func (f *fakeTensorlake) handleRead(w http.ResponseWriter, r *http.Request) {
	if f.inject("read", w, r, func() {}) || f.running(w, r) == nil {
		return
	}
	p, ok := f.hostPath(w, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	st, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		apiError(w, http.StatusNotFound, "not_found", "file not found")
		return
	case err != nil:
		apiError(w, http.StatusInternalServerError, "internal", "%v", err)
		return
	case st.IsDir():
		apiError(w, http.StatusBadRequest, "invalid_request", "path is a directory")
		return
	}
	file, err := os.Open(p)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "internal", "%v", err)
		return
	}
	defer file.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	io.Copy(w, file)
}

func (f *fakeTensorlake) handleWrite(w http.ResponseWriter, r *http.Request) {
	if f.running(w, r) == nil {
		return
	}
	p, ok := f.hostPath(w, r.URL.Query().Get("path"))
	if !ok {
		return
	}
	var werr error
	write := func() {
		if werr = os.MkdirAll(filepath.Dir(p), 0o755); werr != nil {
			return
		}
		file, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			werr = err
			return
		}
		_, werr = io.Copy(file, r.Body)
		werr = errors.Join(werr, file.Close())
	}
	if f.inject("write", w, r, write) {
		return
	}
	write()
	if werr != nil {
		apiError(w, http.StatusInternalServerError, "internal", "%v", werr)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeTensorlake) handleKill(w http.ResponseWriter, r *http.Request) {
	if f.inject("kill", w, r, func() {}) {
		return
	}
	sb := f.running(w, r)
	if sb == nil {
		return
	}
	pid, err := strconv.Atoi(r.PathValue("pid"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "pid %q", r.PathValue("pid"))
		return
	}
	f.mu.Lock()
	_, ok := sb.procs[pid]
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "not_found", "process %d not found", pid)
		return
	}
	syscall.Kill(pid, syscall.SIGKILL)
	w.WriteHeader(http.StatusOK)
}

// sseEvent is one event of a run's stream.
type sseEvent map[string]any

func (f *fakeTensorlake) handleRun(w http.ResponseWriter, r *http.Request) {
	if f.inject("run", w, r, func() {}) {
		return
	}
	sb := f.running(w, r)
	if sb == nil {
		return
	}
	var req struct {
		Command    string            `json:"command"`
		Args       []string          `json:"args"`
		Env        map[string]string `json:"env"`
		WorkingDir string            `json:"working_dir"`
		User       json.RawMessage   `json:"user"`
		Timeout    *int64            `json:"timeout"`
	}
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	if err := d.Decode(&req); err != nil || req.Command == "" {
		apiError(w, http.StatusBadRequest, "invalid_request", "bad body (command is required): %v", err)
		return
	}
	home := filepath.Join(f.root, "home", "tl-user")
	cmd := exec.Command(req.Command, req.Args...)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "USER=tl-user"}
	for k, v := range req.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = home
	// A group of its own, so that the sandbox's end (its VM going) ends
	// everything the command started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if req.WorkingDir != "" {
		cmd.Dir = req.WorkingDir
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "internal", "%v", err)
		return
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		apiError(w, http.StatusInternalServerError, "internal", "%v", err)
		return
	}
	f.mu.Lock()
	if sb.status != "running" {
		f.mu.Unlock()
		apiError(w, http.StatusNotFound, "not_found", "sandbox ended")
		return
	}
	if err := cmd.Start(); err != nil {
		f.mu.Unlock()
		apiError(w, http.StatusBadRequest, "invalid_request", "start %s: %v", req.Command, err)
		return
	}
	pid := cmd.Process.Pid
	sb.procs[pid] = cmd
	f.procs.Add(1)
	f.mu.Unlock()

	// The process runs on when the client goes away, as in a sandbox;
	// its events go to the stream while the client reads it.
	events := make(chan sseEvent, 256)
	go func() {
		defer f.procs.Done()
		var wg sync.WaitGroup
		lines := func(rd io.Reader, stream string) {
			defer wg.Done()
			br := bufio.NewReader(rd)
			for {
				line, err := br.ReadString('\n')
				if line != "" {
					events <- sseEvent{"line": strings.TrimSuffix(line, "\n"), "timestamp": time.Now().UnixMilli(), "stream": stream}
				}
				if err != nil {
					return
				}
			}
		}
		wg.Add(2)
		go lines(stdout, "stdout")
		go lines(stderr, "stderr")
		wg.Wait()
		err := cmd.Wait()
		f.mu.Lock()
		delete(sb.procs, pid)
		f.mu.Unlock()
		var ee *exec.ExitError
		switch {
		case err == nil:
			events <- sseEvent{"exit_code": 0}
		case errors.As(err, &ee) && ee.Exited():
			events <- sseEvent{"exit_code": ee.ExitCode()}
		case errors.As(err, &ee):
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				events <- sseEvent{"signal": int(ws.Signal()), "oom_killed": false}
				break
			}
			events <- sseEvent{"exit_code": -1}
		default:
			events <- sseEvent{"exit_code": -1}
		}
		close(events)
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(ev sseEvent) {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	send(sseEvent{"handle": pid, "pid": pid, "started_at": time.Now().UnixMilli()})
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			send(ev)
		case <-r.Context().Done():
			f.procs.Add(1)
			go func() { // drain, so that the process's goroutine ends
				defer f.procs.Done()
				for range events {
				}
			}()
			return
		}
	}
}
