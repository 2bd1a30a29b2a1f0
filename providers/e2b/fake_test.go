//go:build unix

package e2b_test

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// fakeE2B is a local stand-in for E2B, following its published shapes:
// the control API (spec/openapi.yml of e2b-dev/E2B) on one server, and
// envd (spec/envd: process.proto over Connect with JSON, and /files) on
// another, reached like a self-hosted deployment's single sandbox URL
// with the E2b-Sandbox-Id header. Commands really run, with os/exec, the
// way envd runs them (through /bin/sh, no process group of their own);
// the sandboxes' filesystem is the real one, limited to a temporary root
// which they share, and which is emptied when the last sandbox ends. A sandbox whose timeout has passed on the fake clock is killed,
// as E2B does: its commands' streams break off, as when the sandbox's VM
// goes. Like E2B, the fake caps a sandbox's life at its plan's maximum
// (maxLifetime from its start): a create asking for longer is refused,
// and a timeout past it is answered 204 but ends the sandbox at the cap.
type fakeE2B struct {
	t        *testing.T
	key      string
	template string
	user     string
	root     string
	clock    clockwork.Clock
	api      *httptest.Server
	envd     *httptest.Server

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox
	next      int
	faults    []fakeFault
	pageSize  int
	procs     sync.WaitGroup
	// maxLifetime is the plan's maximum sandbox lifetime (1h, Base).
	maxLifetime time.Duration
}

type fakeSandbox struct {
	id, token string
	template  string
	metadata  map[string]string
	startedAt time.Time
	endAt     time.Time
	procs     map[uint32]*fakeProc
	// expired is closed when the sandbox reaches its end.
	expired chan struct{}
}

type fakeProc struct {
	tag    string
	config json.RawMessage
	cmd    *exec.Cmd
	stdin  io.WriteCloser // when started with stdin: true
}

// fakeFault makes one operation of the fake fail: op is "create",
// "list", "get", "kill", "timeout", "start", "signal", "processes",
// "upload" or "download".
type fakeFault struct {
	op string
	// status is the HTTP status answered (500 when zero).
	status int
	// after lets the operation happen before the answer fails: the
	// answer is lost.
	after bool
	// hang holds the answer until the client gives up; onHang, if set, is
	// called when the hang starts.
	hang   bool
	onHang func()
	// skip lets that many calls pass first.
	skip int
	// times limits how often it fires; 0 means always.
	times int
}

func newFake(t *testing.T) *fakeE2B {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err == nil {
		err = os.MkdirAll(filepath.Join(root, "home", "user"), 0o755) // the default user's home, the default cwd
	}
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeE2B{
		t: t, key: "e2b_test_key", template: "base", user: "user", root: root,
		clock: clockwork.NewFakeClockAt(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)), sandboxes: map[string]*fakeSandbox{},
		maxLifetime: time.Hour,
	}
	api := http.NewServeMux()
	api.HandleFunc("POST /sandboxes", f.handleCreate)
	api.HandleFunc("GET /v2/sandboxes", f.handleList)
	api.HandleFunc("GET /sandboxes/{id}", f.handleGet)
	api.HandleFunc("DELETE /sandboxes/{id}", f.handleKill)
	api.HandleFunc("POST /sandboxes/{id}/timeout", f.handleTimeout)
	f.api = httptest.NewServer(f.controlAuth(api))
	envd := http.NewServeMux()
	envd.HandleFunc("POST /process.Process/Start", f.handleStart)
	envd.HandleFunc("POST /process.Process/SendSignal", f.handleSignal)
	envd.HandleFunc("POST /process.Process/List", f.handleProcesses)
	envd.HandleFunc("POST /process.Process/SendInput", f.handleInput)
	envd.HandleFunc("POST /process.Process/CloseStdin", f.handleInput)
	envd.HandleFunc("GET /files", f.handleDownload)
	envd.HandleFunc("POST /files", f.handleUpload)
	f.envd = httptest.NewServer(envd)
	t.Cleanup(f.close)
	return f
}

// close kills every sandbox, waits for their commands and stops the servers.
func (f *fakeE2B) close() {
	f.mu.Lock()
	for _, sb := range f.sandboxes {
		f.removeLocked(sb)
	}
	f.mu.Unlock()
	f.procs.Wait()
	f.api.Close()
	f.envd.Close()
}

// client is the HTTP client the backend uses: plain HTTP, to loopback.
func (f *fakeE2B) client() *http.Client { return f.api.Client() }

func (f *fakeE2B) fail(ft fakeFault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = append(f.faults, ft)
}

// fault returns the fault for op, counting it.
func (f *fakeE2B) fault(op string) (fakeFault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.faults {
		ft := &f.faults[i]
		if ft.op != op || ft.times < 0 {
			continue
		}
		if ft.skip > 0 {
			ft.skip--
			continue
		}
		if ft.times > 0 {
			if ft.times--; ft.times == 0 {
				ft.times = -1
			}
		}
		return *ft, true
	}
	return fakeFault{}, false
}

// inject runs op under its fault, if any; it reports whether the
// answer was taken over (the handler must then not answer).
func (f *fakeE2B) inject(op string, w http.ResponseWriter, r *http.Request, do func()) bool {
	ft, ok := f.fault(op)
	if !ok {
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
	writeJSON(w, status, map[string]any{"code": status, "message": "injected failure of " + op})
	return true
}

// sandboxIDs are the sandboxes the fake has, sorted.
func (f *fakeE2B) sandboxIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
	return slices.Sorted(maps.Keys(f.sandboxes))
}

// endAt is when sandbox id ends.
func (f *fakeE2B) endAt(id string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sandboxes[id].endAt
}

// end makes sandbox id reach its end now, as E2B ends a sandbox at its
// timeout or its plan's maximum lifetime.
func (f *fakeE2B) end(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes[id].endAt = f.clock.Now()
	f.expireLocked()
}

// waitIdle waits until no command runs in any sandbox: every process and
// whatever still held its output has ended.
func (f *fakeE2B) waitIdle() { f.procs.Wait() }

func (f *fakeE2B) expireLocked() {
	now := f.clock.Now()
	for _, sb := range f.sandboxes {
		if !now.Before(sb.endAt) {
			close(sb.expired) // before its commands die: their streams break off
			f.removeLocked(sb)
		}
	}
}

// removeLocked ends sandbox sb: its commands are killed and, once no
// sandbox is left, the files of the filesystem they shared are gone.
func (f *fakeE2B) removeLocked(sb *fakeSandbox) {
	killProcs(sb)
	delete(f.sandboxes, sb.id)
	if len(f.sandboxes) > 0 {
		return
	}
	entries, _ := os.ReadDir(f.root)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(f.root, e.Name()))
	}
	os.MkdirAll(filepath.Join(f.root, "home", f.user), 0o755)
}

// killProcs kills every command of sb, with the process group it made
// itself (by setsid), as the end of the sandbox's VM would.
func killProcs(sb *fakeSandbox) {
	for pid := range sb.procs {
		if pgid, err := syscall.Getpgid(int(pid)); err == nil && pgid == int(pid) {
			syscall.Kill(-int(pid), syscall.SIGKILL)
		}
		syscall.Kill(int(pid), syscall.SIGKILL)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func apiError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]any{"code": status, "message": fmt.Sprintf(format, args...)})
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// decodeStrict decodes a JSON body, refusing fields the API does not
// know, so that a client sending wrong names fails here.
func decodeStrict(r io.Reader, v any) error {
	d := json.NewDecoder(r)
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// ---- control API ----

func (f *fakeE2B) controlAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-API-Key") != f.key {
			apiError(w, http.StatusUnauthorized, "Invalid API key")
			return
		}
		f.mu.Lock()
		f.expireLocked()
		f.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (f *fakeE2B) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		TemplateID string            `json:"templateID"`
		Timeout    *int32            `json:"timeout"`
		Metadata   map[string]string `json:"metadata"`
		Secure     bool              `json:"secure"`
	}
	if err := decodeStrict(r.Body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "bad body: %v", err)
		return
	}
	if req.TemplateID != f.template {
		apiError(w, http.StatusNotFound, "template '%s' not found", req.TemplateID)
		return
	}
	timeout := int32(15)
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout <= 0 {
		apiError(w, http.StatusBadRequest, "timeout must be positive")
		return
	}
	if max := f.maxLifetime; time.Duration(timeout)*time.Second > max {
		apiError(w, http.StatusBadRequest, "Timeout cannot be greater than %d hours", int(max.Hours()))
		return
	}
	var sb *fakeSandbox
	create := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.next++
		now := f.clock.Now()
		sb = &fakeSandbox{
			id: fmt.Sprintf("i%04dfake", f.next), template: req.TemplateID, metadata: req.Metadata,
			startedAt: now, endAt: now.Add(time.Duration(timeout) * time.Second), procs: map[uint32]*fakeProc{},
			expired: make(chan struct{}),
		}
		if req.Secure {
			sb.token = "tok_" + randomHex(8)
		}
		f.sandboxes[sb.id] = sb
	}
	if f.inject("create", w, r, create) {
		return
	}
	create()
	writeJSON(w, http.StatusCreated, map[string]any{
		"templateID": sb.template, "sandboxID": sb.id, "clientID": "6532622b", "envdVersion": "0.2.4",
		"envdAccessToken": sb.token, "domain": nil,
	})
}

func (f *fakeE2B) listed(sb *fakeSandbox) map[string]any {
	return map[string]any{
		"templateID": sb.template, "sandboxID": sb.id, "clientID": "6532622b", "startedAt": sb.startedAt,
		"endAt": sb.endAt, "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "state": "running",
		"envdVersion": "0.2.4", "metadata": sb.metadata,
	}
}

func (f *fakeE2B) handleList(w http.ResponseWriter, r *http.Request) {
	if f.inject("list", w, r, func() {}) {
		return
	}
	filter, err := url.ParseQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad metadata query: %v", err)
		return
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 100 {
			apiError(w, http.StatusBadRequest, "bad limit %q", v)
			return
		}
	}
	if f.pageSize > 0 {
		limit = min(limit, f.pageSize)
	}
	start := 0
	if v := r.URL.Query().Get("nextToken"); v != "" {
		if start, err = strconv.Atoi(v); err != nil {
			apiError(w, http.StatusBadRequest, "bad nextToken %q", v)
			return
		}
	}
	f.mu.Lock()
	var all []map[string]any
	for _, id := range slices.Sorted(maps.Keys(f.sandboxes)) {
		sb := f.sandboxes[id]
		match := true
		for k := range filter {
			if sb.metadata[k] != filter.Get(k) {
				match = false
			}
		}
		if match {
			all = append(all, f.listed(sb))
		}
	}
	f.mu.Unlock()
	page := all[min(start, len(all)):min(start+limit, len(all))]
	if start+limit < len(all) {
		w.Header().Set("X-Next-Token", strconv.Itoa(start+limit))
	}
	if page == nil {
		page = []map[string]any{}
	}
	writeJSON(w, http.StatusOK, page)
}

func (f *fakeE2B) handleGet(w http.ResponseWriter, r *http.Request) {
	if f.inject("get", w, r, func() {}) {
		return
	}
	f.mu.Lock()
	sb, ok := f.sandboxes[r.PathValue("id")]
	var body map[string]any
	if ok {
		body = f.listed(sb)
		body["envdAccessToken"] = sb.token
		body["domain"] = nil
	}
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "sandbox \"%s\" doesn't exist or you don't have access to it", r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (f *fakeE2B) handleKill(w http.ResponseWriter, r *http.Request) {
	found := false
	kill := func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if sb, ok := f.sandboxes[r.PathValue("id")]; ok {
			found = true
			f.removeLocked(sb)
		}
	}
	if f.inject("kill", w, r, kill) {
		return
	}
	kill()
	if !found {
		apiError(w, http.StatusNotFound, "sandbox \"%s\" not found", r.PathValue("id"))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeE2B) handleTimeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int32 `json:"timeout"`
	}
	if err := decodeStrict(r.Body, &req); err != nil || req.Timeout == nil || *req.Timeout < 0 {
		apiError(w, http.StatusBadRequest, "bad body: want {\"timeout\": seconds}")
		return
	}
	if f.inject("timeout", w, r, func() {}) {
		return
	}
	f.mu.Lock()
	sb, ok := f.sandboxes[r.PathValue("id")]
	if ok {
		sb.endAt = f.clock.Now().Add(time.Duration(*req.Timeout) * time.Second)
		if cap := sb.startedAt.Add(f.maxLifetime); sb.endAt.After(cap) {
			sb.endAt = cap // granted silently: the answer is still 204
		}
	}
	f.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "sandbox \"%s\" not found", r.PathValue("id"))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// ---- envd ----

// sandbox authenticates an envd request: the sandbox named by
// E2b-Sandbox-Id, its access token, and the user in Basic auth.
func (f *fakeE2B) sandbox(w http.ResponseWriter, r *http.Request) (*fakeSandbox, bool) {
	f.mu.Lock()
	f.expireLocked()
	sb, ok := f.sandboxes[r.Header.Get("E2b-Sandbox-Id")]
	f.mu.Unlock()
	switch {
	case !ok:
		http.Error(w, "The sandbox was not found", http.StatusBadGateway)
		return nil, false
	case r.Header.Get("E2b-Sandbox-Port") != "49983":
		http.Error(w, "no service on that port", http.StatusBadGateway)
		return nil, false
	case r.Header.Get("X-Access-Token") != sb.token:
		apiError(w, http.StatusUnauthorized, "invalid access token")
		return nil, false
	}
	return sb, true
}

func (f *fakeE2B) connectError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"code": code, "message": msg})
}

// checkUser checks the Basic auth user of a process call.
func (f *fakeE2B) checkUser(w http.ResponseWriter, r *http.Request) bool {
	user, pass, ok := r.BasicAuth()
	if !ok || user != f.user || pass != "" {
		f.connectError(w, http.StatusUnauthorized, "unauthenticated", "user not set or unknown")
		return false
	}
	return true
}

// inRoot checks that p is an absolute path in the fake's root.
func (f *fakeE2B) inRoot(p string) bool {
	return filepath.IsAbs(p) && (p == f.root || strings.HasPrefix(filepath.Clean(p), f.root+string(filepath.Separator)))
}

// frameWriter writes Connect envelopes to a streaming answer until the
// handler is done.
type frameWriter struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	done bool
}

func (fw *frameWriter) frame(flags byte, v any) {
	b, _ := json.Marshal(v)
	head := make([]byte, 5)
	head[0] = flags
	binary.BigEndian.PutUint32(head[1:], uint32(len(b)))
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.done {
		return
	}
	fw.w.Write(append(head, b...))
	fw.w.(http.Flusher).Flush()
}

func (fw *frameWriter) finish() {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	fw.done = true
}

// output streams one of a command's outputs as data events.
type output struct {
	fw     *frameWriter
	stream string
}

func (o output) Write(p []byte) (int, error) {
	o.fw.frame(0, map[string]any{"event": map[string]any{"data": map[string][]byte{o.stream: p}}})
	return len(p), nil
}

func (f *fakeE2B) handleStart(w http.ResponseWriter, r *http.Request) {
	sb, ok := f.sandbox(w, r)
	if !ok || !f.checkUser(w, r) {
		return
	}
	if r.Header.Get("Content-Type") != "application/connect+json" {
		f.connectError(w, http.StatusUnsupportedMediaType, "unknown", "want application/connect+json")
		return
	}
	var head [5]byte
	if _, err := io.ReadFull(r.Body, head[:]); err != nil {
		f.connectError(w, http.StatusBadRequest, "invalid_argument", "no envelope")
		return
	}
	body := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(r.Body, body); err != nil || head[0] != 0 {
		f.connectError(w, http.StatusBadRequest, "invalid_argument", "bad envelope")
		return
	}
	var req struct {
		Process struct {
			Cmd  string            `json:"cmd"`
			Args []string          `json:"args"`
			Envs map[string]string `json:"envs"`
			Cwd  *string           `json:"cwd"`
		} `json:"process"`
		Tag   string `json:"tag"`
		Stdin *bool  `json:"stdin"`
	}
	if err := decodeStrict(bytes.NewReader(body), &req); err != nil {
		f.connectError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return
	}
	fw := &frameWriter{w: w}
	defer fw.finish()
	cwd := filepath.Join(f.root, "home", f.user)
	if req.Process.Cwd != nil {
		cwd = *req.Process.Cwd
	}
	st, err := os.Stat(cwd)
	cwdOK := f.inRoot(cwd) && err == nil && st.IsDir()
	// envd's own wrapper: sh execs the command, so the pid is the command's.
	cmd := exec.Command("/bin/sh", append([]string{"-c", `exec "$@"`, "--", req.Process.Cmd}, req.Process.Args...)...)
	cmd.Dir = cwd
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(f.root, "home", f.user), "USER=" + f.user}
	for k, v := range req.Process.Envs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = output{fw, "stdout"}, output{fw, "stderr"}
	var stdin io.WriteCloser
	if req.Stdin != nil && *req.Stdin {
		stdin, _ = cmd.StdinPipe() // cannot fail before Start
	}
	config, _ := json.Marshal(req.Process)
	var pid uint32
	begin := func() error {
		fw.mu.Lock() // output waits for the start event
		defer fw.mu.Unlock()
		if err := cmd.Start(); err != nil {
			return err
		}
		pid = uint32(cmd.Process.Pid)
		f.mu.Lock()
		sb.procs[pid] = &fakeProc{tag: req.Tag, config: config, cmd: cmd, stdin: stdin}
		f.procs.Add(1)
		f.mu.Unlock()
		return nil
	}
	// A fault after the start: the command runs, but its answer is lost.
	if f.inject("start", w, r, func() {
		fw.finish()
		if cwdOK && begin() == nil {
			go f.reap(sb, pid, cmd, nil)
		}
	}) {
		return
	}
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	endStream := func(code, msg string) {
		if code == "" {
			fw.frame(2, map[string]any{})
			return
		}
		fw.frame(2, map[string]any{"error": map[string]string{"code": code, "message": msg}})
	}
	if !cwdOK {
		endStream("invalid_argument", fmt.Sprintf("cwd '%s' does not exist", cwd))
		return
	}
	if err := begin(); err != nil {
		endStream("invalid_argument", fmt.Sprintf("error starting process '%s': %v", req.Process.Cmd, err))
		return
	}
	fw.frame(0, map[string]any{"event": map[string]any{"start": map[string]uint32{"pid": pid}}})
	ended := make(chan map[string]any, 1)
	go f.reap(sb, pid, cmd, ended)
	select {
	case end := <-ended:
		select {
		case <-sb.expired: // the sandbox went: no end event, the stream breaks
			fw.finish()
			panic(http.ErrAbortHandler)
		default:
		}
		fw.frame(0, map[string]any{"event": map[string]any{"end": end}})
		endStream("", "")
	case <-sb.expired:
		fw.finish()
		panic(http.ErrAbortHandler)
	case <-r.Context().Done():
		// Like envd, a command outlives the stream that started it.
	}
}

// reap waits for a command (and everything holding its output) and
// reports its end like envd: exitCode -1 and the status "signal: killed"
// for a command a signal ended.
func (f *fakeE2B) reap(sb *fakeSandbox, pid uint32, cmd *exec.Cmd, ended chan<- map[string]any) {
	defer f.procs.Done()
	err := cmd.Wait()
	f.mu.Lock()
	delete(sb.procs, pid)
	f.mu.Unlock()
	end := map[string]any{"status": cmd.ProcessState.String()}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		end["exitCode"] = code
	}
	if cmd.ProcessState.Exited() {
		end["exited"] = true
	}
	if err != nil {
		end["error"] = err.Error()
	}
	if ended != nil {
		ended <- end
	}
}

func (f *fakeE2B) unaryRequest(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Connect-Protocol-Version") != "1" {
		f.connectError(w, http.StatusUnsupportedMediaType, "unknown", "want application/json and Connect-Protocol-Version 1")
		return false
	}
	if err := decodeStrict(r.Body, v); err != nil {
		f.connectError(w, http.StatusBadRequest, "invalid_argument", err.Error())
		return false
	}
	return true
}

// handleInput answers SendInput (data for a command's stdin) and
// CloseStdin, for commands started with stdin.
func (f *fakeE2B) handleInput(w http.ResponseWriter, r *http.Request) {
	sb, ok := f.sandbox(w, r)
	if !ok || !f.checkUser(w, r) {
		return
	}
	var req struct {
		Process struct {
			Pid uint32 `json:"pid"`
		} `json:"process"`
		Input *struct {
			Stdin []byte `json:"stdin"`
		} `json:"input"`
	}
	if !f.unaryRequest(w, r, &req) {
		return
	}
	f.mu.Lock()
	p := sb.procs[req.Process.Pid]
	f.mu.Unlock()
	if p == nil || p.stdin == nil {
		f.connectError(w, http.StatusNotFound, "not_found", fmt.Sprintf("process with pid %d not found or without stdin", req.Process.Pid))
		return
	}
	var err error
	if strings.HasSuffix(r.URL.Path, "/CloseStdin") {
		err = p.stdin.Close()
	} else if req.Input != nil {
		_, err = p.stdin.Write(req.Input.Stdin)
	}
	if err != nil {
		f.connectError(w, http.StatusBadRequest, "failed_precondition", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (f *fakeE2B) handleSignal(w http.ResponseWriter, r *http.Request) {
	sb, ok := f.sandbox(w, r)
	if !ok || !f.checkUser(w, r) {
		return
	}
	var req struct {
		Process struct {
			Pid uint32 `json:"pid"`
			Tag string `json:"tag"`
		} `json:"process"`
		Signal string `json:"signal"`
	}
	if !f.unaryRequest(w, r, &req) {
		return
	}
	sig := map[string]syscall.Signal{"SIGNAL_SIGKILL": syscall.SIGKILL, "SIGNAL_SIGTERM": syscall.SIGTERM}[req.Signal]
	if sig == 0 {
		f.connectError(w, http.StatusBadRequest, "invalid_argument", "unsupported signal "+req.Signal)
		return
	}
	if f.inject("signal", w, r, func() {}) {
		return
	}
	f.mu.Lock()
	var target *fakeProc
	for pid, p := range sb.procs {
		if pid == req.Process.Pid || req.Process.Tag != "" && p.tag == req.Process.Tag {
			target = p
		}
	}
	if target != nil {
		target.cmd.Process.Signal(sig)
	}
	f.mu.Unlock()
	if target == nil {
		f.connectError(w, http.StatusNotFound, "not_found", fmt.Sprintf("process with pid %d not found", req.Process.Pid))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

func (f *fakeE2B) handleProcesses(w http.ResponseWriter, r *http.Request) {
	sb, ok := f.sandbox(w, r)
	if !ok || !f.checkUser(w, r) {
		return
	}
	var req struct{}
	if !f.unaryRequest(w, r, &req) {
		return
	}
	if f.inject("processes", w, r, func() {}) {
		return
	}
	f.mu.Lock()
	var list []map[string]any
	for pid, p := range sb.procs {
		list = append(list, map[string]any{"config": p.config, "pid": pid, "tag": p.tag})
	}
	f.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"processes": list})
}

// filePath checks a /files request and returns its path.
func (f *fakeE2B) filePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	if _, ok := f.sandbox(w, r); !ok {
		return "", false
	}
	if u := r.URL.Query().Get("username"); u != f.user {
		apiError(w, http.StatusUnauthorized, "error looking up user '%s'", u)
		return "", false
	}
	p := r.URL.Query().Get("path")
	if !f.inRoot(p) {
		apiError(w, http.StatusBadRequest, "path '%s' is outside the fake sandbox's root", p)
		return "", false
	}
	return p, true
}

func (f *fakeE2B) handleDownload(w http.ResponseWriter, r *http.Request) {
	p, ok := f.filePath(w, r)
	if !ok || f.inject("download", w, r, func() {}) {
		return
	}
	file, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		apiError(w, http.StatusNotFound, "path '%s' does not exist", p)
		return
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "error opening file '%s': %v", p, err)
		return
	}
	defer file.Close()
	if st, err := file.Stat(); err != nil || st.IsDir() {
		apiError(w, http.StatusBadRequest, "path '%s' is a directory", p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	io.Copy(w, file)
}

func (f *fakeE2B) handleUpload(w http.ResponseWriter, r *http.Request) {
	p, ok := f.filePath(w, r)
	if !ok {
		return
	}
	write := func() error {
		mr, err := r.MultipartReader()
		if err != nil {
			return err
		}
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if part.FormName() != "file" {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			file, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
			if err != nil {
				return err
			}
			_, err = io.Copy(file, part)
			if cerr := file.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
	var werr error
	if f.inject("upload", w, r, func() { werr = write() }) {
		return
	}
	if werr = write(); werr != nil {
		apiError(w, http.StatusBadRequest, "error writing file: %v", werr)
		return
	}
	writeJSON(w, http.StatusOK, []map[string]string{{"path": p, "name": filepath.Base(p), "type": "file"}})
}
