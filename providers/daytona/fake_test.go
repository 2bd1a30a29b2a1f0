//go:build unix

package daytona_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
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

	"github.com/google/uuid"

	"github.com/crabbox-dev/crabbox/internal/testgateway"
)

// fault is what the fake does to one API call.
type fault int

const (
	noFault   fault = iota
	failFirst       // answer 500 without doing anything
	loseReply       // do it, then answer 500 (the answer is lost)
	hang            // block until the client gives up, doing nothing
	stall           // do it, then block until the client gives up
)

// fakeDaytona is a local Daytona: its REST API under /api and its toolbox
// under /toolbox/<sandbox id>, following the published request and
// response shapes. Sandboxes are directories under a temp dir; commands
// run there with os/exec, in a process group per command, and their
// output is logged line by line with the toolbox's stream markers.
type fakeDaytona struct {
	t      *testing.T
	key    string
	root   string
	server *httptest.Server

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox // by ID
	faults    map[string]fault        // by operation name
	hung      chan string             // receives the operation of a hanging call
	pageSize  int
	// startPolls is how many reads of a new sandbox still show it creating.
	startPolls int
	// startState, if set, is the state a new sandbox ends up in instead of
	// started.
	startState string
	creates    []json.RawMessage
	calls      []string

	// SSH access (fake_ssh_test.go).
	gateway *testgateway.Gateway
	tokens  map[string]*fakeToken
	// sshDown is how many more channels through the gateway find the
	// sandbox's SSH server not up yet.
	sshDown int
	// sshCommandPort, if set, is the port the SSH accesses' commands
	// name instead of the gateway's.
	sshCommandPort int
}

type fakeSandbox struct {
	ID, Name, State, User, Target, Snapshot string
	Labels                                  map[string]string
	AutoStop, AutoDelete                    int
	BuildInfo                               json.RawMessage
	CreatedAt                               time.Time
	dir                                     string // the sandbox's file system
	polls                                   int
	sessions                                map[string]*fakeSession
	box                                     *testgateway.Box // its SSH server, once reached
}

type fakeSession struct{ commands map[string]*fakeCommand }

type fakeCommand struct {
	line string
	cmd  *exec.Cmd
	done chan struct{}

	mu   sync.Mutex
	log  bytes.Buffer
	exit *int
}

func newFakeDaytona(t *testing.T) *fakeDaytona {
	t.Helper()
	f := &fakeDaytona{
		t: t, key: "dtn_test_" + uuid.NewString(), root: t.TempDir(),
		sandboxes: map[string]*fakeSandbox{}, faults: map[string]fault{}, hung: make(chan string, 16),
		pageSize: 2, startPolls: 1, tokens: map[string]*fakeToken{},
	}
	mux := http.NewServeMux()
	api := map[string]http.HandlerFunc{
		"POST /api/sandbox":                                          f.create,
		"GET /api/sandbox":                                           f.list,
		"GET /api/sandbox/{ref}":                                     f.get,
		"DELETE /api/sandbox/{ref}":                                  f.delete,
		"PUT /api/sandbox/{ref}/labels":                              f.labels,
		"POST /api/sandbox/{ref}/autostop/{interval}":                f.autostop,
		"GET /api/snapshots/{ref}":                                   f.snapshot,
		"GET /toolbox/{id}/user-home-dir":                            f.home,
		"POST /toolbox/{id}/process/session":                         f.createSession,
		"DELETE /toolbox/{id}/process/session/{sid}":                 f.deleteSession,
		"POST /toolbox/{id}/process/session/{sid}/exec":              f.exec,
		"GET /toolbox/{id}/process/session/{sid}/command/{cid}":      f.command,
		"GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs": f.logs,
		"POST /toolbox/{id}/files/folder":                            f.folder,
		"POST /toolbox/{id}/files/upload":                            f.upload,
		"POST /toolbox/{id}/files/permissions":                       f.permissions,
		"GET /toolbox/{id}/files/download":                           f.download,
		"POST /api/sandbox/{ref}/ssh-access":                         f.createSSHAccess,
		"DELETE /api/sandbox/{ref}/ssh-access":                       f.revokeSSHAccess,
	}
	for pattern, h := range api {
		op := pattern
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { f.serve(op, h, w, r) })
	}
	f.server = httptest.NewServer(mux)
	gw, err := testgateway.Start(testgateway.Config{Login: f.sshLogin})
	if err != nil {
		f.server.Close()
		t.Fatal(err)
	}
	f.gateway = gw
	t.Cleanup(f.close)
	return f
}

// Operation names for faults.
const (
	opCreate        = "POST /api/sandbox"
	opList          = "GET /api/sandbox"
	opGet           = "GET /api/sandbox/{ref}"
	opDelete        = "DELETE /api/sandbox/{ref}"
	opLabels        = "PUT /api/sandbox/{ref}/labels"
	opAutostop      = "POST /api/sandbox/{ref}/autostop/{interval}"
	opHome          = "GET /toolbox/{id}/user-home-dir"
	opSession       = "POST /toolbox/{id}/process/session"
	opDeleteSession = "DELETE /toolbox/{id}/process/session/{sid}"
	opExec          = "POST /toolbox/{id}/process/session/{sid}/exec"
	opCommand       = "GET /toolbox/{id}/process/session/{sid}/command/{cid}"
	opLogs          = "GET /toolbox/{id}/process/session/{sid}/command/{cid}/logs"
	opFolder        = "POST /toolbox/{id}/files/folder"
	opUpload        = "POST /toolbox/{id}/files/upload"
	opPermissions   = "POST /toolbox/{id}/files/permissions"
	opDownload      = "GET /toolbox/{id}/files/download"
	opSSHAccess     = "POST /api/sandbox/{ref}/ssh-access"
)

func (f *fakeDaytona) setFault(op string, k fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = k
}

func (f *fakeDaytona) serve(op string, h http.HandlerFunc, w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+f.key {
		apiErr(w, http.StatusUnauthorized, "Invalid API key")
		return
	}
	f.mu.Lock()
	k := f.faults[op]
	f.calls = append(f.calls, op)
	f.mu.Unlock()
	switch k {
	case failFirst:
		apiErr(w, http.StatusInternalServerError, "injected failure")
	case hang:
		// The server notices the client going away only once the body
		// has been read.
		_, _ = io.Copy(io.Discard, r.Body)
		f.hung <- op
		<-r.Context().Done()
	case stall:
		h(&discard{header: http.Header{}}, r)
		f.hung <- op
		<-r.Context().Done()
	case loseReply:
		h(&discard{header: http.Header{}}, r)
		apiErr(w, http.StatusBadGateway, "injected: the answer was lost")
	default:
		h(w, r)
	}
}

// discard is a ResponseWriter that throws the answer away.
type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

func apiErr(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"statusCode": status, "message": msg, "error": http.StatusText(status)})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sandboxJSON is the API's Sandbox shape.
func (f *fakeDaytona) sandboxJSON(s *fakeSandbox) map[string]any {
	return map[string]any{
		"id": s.ID, "organizationId": "org-1", "name": s.Name, "snapshot": s.Snapshot, "user": s.User,
		"env": map[string]string{}, "labels": maps.Clone(s.Labels), "public": false, "networkBlockAll": false,
		"target": s.Target, "cpu": 1, "gpu": 0, "memory": 1, "disk": 3, "state": s.State, "desiredState": "started",
		"autoStopInterval": s.AutoStop, "autoArchiveInterval": 10080, "autoDeleteInterval": s.AutoDelete,
		"createdAt": s.CreatedAt.Format(time.RFC3339Nano), "updatedAt": s.CreatedAt.Format(time.RFC3339Nano),
		"lastActivityAt":  s.CreatedAt.Format(time.RFC3339Nano),
		"toolboxProxyUrl": f.server.URL + "/toolbox",
	}
}

// lookup finds a sandbox by ID or name; the caller holds f.mu.
func (f *fakeDaytona) lookup(ref string) *fakeSandbox {
	if s, ok := f.sandboxes[ref]; ok {
		return s
	}
	for _, s := range f.sandboxes {
		if s.Name == ref {
			return s
		}
	}
	return nil
}

func (f *fakeDaytona) create(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req struct {
		Name, Snapshot, User, Target string
		Labels                       map[string]string
		AutoStopInterval             *int
		AutoDeleteInterval           *int
		BuildInfo                    json.RawMessage
	}
	if err := json.Unmarshal(raw, &req); err != nil || req.Name == "" {
		apiErr(w, http.StatusBadRequest, "invalid body")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.creates = append(f.creates, raw)
	if f.lookup(req.Name) != nil {
		apiErr(w, http.StatusConflict, "Sandbox with name "+req.Name+" already exists")
		return
	}
	id := uuid.NewString()
	dir := filepath.Join(f.root, id)
	home := filepath.Join(dir, "home", "daytona")
	if err := os.MkdirAll(home, 0o755); err != nil {
		apiErr(w, http.StatusInternalServerError, err.Error())
		return
	}
	s := &fakeSandbox{
		ID: id, Name: req.Name, State: "creating", User: cmpOr(req.User, "daytona"), Target: cmpOr(req.Target, "us"),
		Snapshot: req.Snapshot, Labels: req.Labels, AutoStop: 15, AutoDelete: -1, BuildInfo: req.BuildInfo,
		CreatedAt: time.Now().UTC(), dir: dir, sessions: map[string]*fakeSession{},
	}
	if req.AutoStopInterval != nil {
		s.AutoStop = *req.AutoStopInterval
	}
	if req.AutoDeleteInterval != nil {
		s.AutoDelete = *req.AutoDeleteInterval
	}
	f.sandboxes[id] = s
	reply(w, http.StatusOK, f.sandboxJSON(s))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (f *fakeDaytona) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.lookup(r.PathValue("ref"))
	if s == nil {
		apiErr(w, http.StatusNotFound, "Sandbox with ID or name "+r.PathValue("ref")+" not found")
		return
	}
	if s.State == "creating" {
		if s.polls++; s.polls >= f.startPolls {
			s.State = cmpOr(f.startState, "started")
		}
	}
	reply(w, http.StatusOK, f.sandboxJSON(s))
}

func (f *fakeDaytona) list(w http.ResponseWriter, r *http.Request) {
	var want map[string]string
	if l := r.URL.Query().Get("labels"); l != "" {
		if err := json.Unmarshal([]byte(l), &want); err != nil {
			apiErr(w, http.StatusBadRequest, "labels must be a JSON object")
			return
		}
	}
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	f.mu.Lock()
	defer f.mu.Unlock()
	var match []*fakeSandbox
	for _, s := range f.sandboxes {
		all := true
		for k, v := range want {
			all = all && s.Labels[k] == v
		}
		if all {
			match = append(match, s)
		}
	}
	slices.SortFunc(match, func(a, b *fakeSandbox) int { return strings.Compare(a.ID, b.ID) })
	size := min(max(limit, 1), f.pageSize)
	items := []map[string]any{}
	for i := start; i < len(match) && i < start+size; i++ {
		items = append(items, f.sandboxJSON(match[i]))
	}
	var next any
	if start+size < len(match) {
		next = strconv.Itoa(start + size)
	}
	reply(w, http.StatusOK, map[string]any{"items": items, "nextCursor": next})
}

func (f *fakeDaytona) delete(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	s := f.lookup(r.PathValue("ref"))
	if s == nil {
		f.mu.Unlock()
		apiErr(w, http.StatusNotFound, "Sandbox not found")
		return
	}
	delete(f.sandboxes, s.ID)
	sessions := slices.Collect(maps.Values(s.sessions))
	box := s.box
	f.mu.Unlock()
	for _, sess := range sessions {
		f.kill(sess)
	}
	if box != nil {
		_ = box.Close()
	}
	s.State = "destroyed"
	reply(w, http.StatusOK, f.sandboxJSON(s))
}

func (f *fakeDaytona) labels(w http.ResponseWriter, r *http.Request) {
	var req struct{ Labels map[string]string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Labels == nil {
		apiErr(w, http.StatusBadRequest, "labels required")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.lookup(r.PathValue("ref"))
	if s == nil {
		apiErr(w, http.StatusNotFound, "Sandbox not found")
		return
	}
	s.Labels = req.Labels
	reply(w, http.StatusOK, map[string]any{"labels": s.Labels})
}

func (f *fakeDaytona) autostop(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.PathValue("interval"))
	if err != nil || n < 0 {
		apiErr(w, http.StatusBadRequest, "interval must be a non-negative number")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.lookup(r.PathValue("ref"))
	if s == nil {
		apiErr(w, http.StatusNotFound, "Sandbox not found")
		return
	}
	s.AutoStop = n
	reply(w, http.StatusOK, f.sandboxJSON(s))
}

func (f *fakeDaytona) snapshot(w http.ResponseWriter, r *http.Request) {
	if r.PathValue("ref") != "crabbox-base" {
		apiErr(w, http.StatusNotFound, "Snapshot not found")
		return
	}
	reply(w, http.StatusOK, map[string]any{"id": "snap-1", "name": "crabbox-base", "state": "active"})
}

// started returns the started sandbox of the toolbox request, or answers
// an error.
func (f *fakeDaytona) started(w http.ResponseWriter, r *http.Request) *fakeSandbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sandboxes[r.PathValue("id")]
	if s == nil || s.State != "started" {
		apiErr(w, http.StatusNotFound, "sandbox not found or not started")
		return nil
	}
	return s
}

// path maps a sandbox path (query "path") to the fake's directory; the
// sandbox's paths are real paths under its directory.
func (f *fakeDaytona) path(w http.ResponseWriter, r *http.Request, s *fakeSandbox) (string, bool) {
	p := r.URL.Query().Get("path")
	if p == "" || !filepath.IsAbs(p) || !strings.HasPrefix(filepath.Clean(p)+"/", s.dir+"/") {
		apiErr(w, http.StatusBadRequest, "path outside the sandbox: "+p)
		return "", false
	}
	return filepath.Clean(p), true
}

func (f *fakeDaytona) home(w http.ResponseWriter, r *http.Request) {
	if s := f.started(w, r); s != nil {
		reply(w, http.StatusOK, map[string]string{"dir": filepath.Join(s.dir, "home", "daytona")})
	}
}

func (f *fakeDaytona) createSession(w http.ResponseWriter, r *http.Request) {
	s := f.started(w, r)
	if s == nil {
		return
	}
	var req struct{ SessionID string }
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.SessionID == "" {
		apiErr(w, http.StatusBadRequest, "sessionId required")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, dup := s.sessions[req.SessionID]; dup {
		apiErr(w, http.StatusConflict, "session already exists")
		return
	}
	s.sessions[req.SessionID] = &fakeSession{commands: map[string]*fakeCommand{}}
	w.WriteHeader(http.StatusCreated)
}

func (f *fakeDaytona) session(w http.ResponseWriter, r *http.Request) (*fakeSandbox, *fakeSession) {
	s := f.started(w, r)
	if s == nil {
		return nil, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sess := s.sessions[r.PathValue("sid")]
	if sess == nil {
		apiErr(w, http.StatusNotFound, "session not found")
	}
	return s, sess
}

func (f *fakeDaytona) deleteSession(w http.ResponseWriter, r *http.Request) {
	s, sess := f.session(w, r)
	if sess == nil {
		return
	}
	f.kill(sess)
	f.mu.Lock()
	delete(s.sessions, r.PathValue("sid"))
	f.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// kill ends the process group of every command of the session (SIGTERM,
// then SIGKILL after a grace period, as the daemon does) and waits for
// them.
func (f *fakeDaytona) kill(sess *fakeSession) {
	f.mu.Lock()
	commands := slices.Collect(maps.Values(sess.commands))
	f.mu.Unlock()
	for _, c := range commands {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.done
		}
	}
}

func (f *fakeDaytona) exec(w http.ResponseWriter, r *http.Request) {
	s, sess := f.session(w, r)
	if sess == nil {
		return
	}
	var req struct {
		Command  string
		RunAsync bool
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || strings.TrimSpace(req.Command) == "" || !req.RunAsync {
		apiErr(w, http.StatusBadRequest, "command required (this fake runs only runAsync commands)")
		return
	}
	c := &fakeCommand{line: req.Command, done: make(chan struct{})}
	c.cmd = exec.Command("/bin/sh", "-c", req.Command)
	c.cmd.Dir = filepath.Join(s.dir, "home", "daytona")
	c.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + c.cmd.Dir}
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, _ := c.cmd.StdoutPipe()
	stderr, _ := c.cmd.StderrPipe()
	if err := c.cmd.Start(); err != nil {
		apiErr(w, http.StatusInternalServerError, err.Error())
		return
	}
	var copies sync.WaitGroup
	for _, p := range []struct {
		r      io.Reader
		marker []byte
	}{{stdout, []byte{1, 1, 1}}, {stderr, []byte{2, 2, 2}}} {
		copies.Go(func() { c.label(p.r, p.marker) })
	}
	go func() {
		copies.Wait()
		err := c.cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			ws := ee.Sys().(syscall.WaitStatus)
			code = ws.ExitStatus()
			if ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		c.mu.Lock()
		c.exit = &code
		c.mu.Unlock()
		close(c.done)
	}()
	id := uuid.NewString()
	f.mu.Lock()
	sess.commands[id] = c
	f.mu.Unlock()
	reply(w, http.StatusAccepted, map[string]any{"cmdId": id})
}

// label appends each line of r to the log behind marker, as the daemon's
// wrapper does (a last line without a newline gets one).
func (c *fakeCommand) label(r io.Reader, marker []byte) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			c.mu.Lock()
			c.log.Write(marker)
			c.log.Write(line)
			c.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

func (f *fakeDaytona) sessionCommand(w http.ResponseWriter, r *http.Request) *fakeCommand {
	_, sess := f.session(w, r)
	if sess == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	c := sess.commands[r.PathValue("cid")]
	if c == nil {
		apiErr(w, http.StatusNotFound, "command not found")
	}
	return c
}

func (f *fakeDaytona) command(w http.ResponseWriter, r *http.Request) {
	if c := f.sessionCommand(w, r); c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		out := map[string]any{"id": r.PathValue("cid"), "command": c.line}
		if c.exit != nil {
			out["exitCode"] = *c.exit
		}
		reply(w, http.StatusOK, out)
	}
}

func (f *fakeDaytona) logs(w http.ResponseWriter, r *http.Request) {
	c := f.sessionCommand(w, r)
	if c == nil {
		return
	}
	c.mu.Lock()
	log := bytes.Clone(c.log.Bytes())
	c.mu.Unlock()
	if r.Header.Get("X-Daytona-Split-Output") != "true" {
		log = bytes.ReplaceAll(bytes.ReplaceAll(log, []byte{1, 1, 1}, nil), []byte{2, 2, 2}, nil)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(log)
}

func (f *fakeDaytona) folder(w http.ResponseWriter, r *http.Request) {
	s := f.started(w, r)
	if s == nil {
		return
	}
	p, ok := f.path(w, r, s)
	if !ok {
		return
	}
	mode, err := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if err != nil {
		apiErr(w, http.StatusBadRequest, "invalid mode format")
		return
	}
	if err := os.MkdirAll(p, os.FileMode(mode)); err != nil {
		apiErr(w, http.StatusBadRequest, err.Error())
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (f *fakeDaytona) upload(w http.ResponseWriter, r *http.Request) {
	s := f.started(w, r)
	if s == nil {
		return
	}
	p, ok := f.path(w, r, s)
	if !ok {
		return
	}
	file, _, err := r.FormFile("file")
	if err != nil {
		apiErr(w, http.StatusBadRequest, err.Error())
		return
	}
	defer file.Close()
	out, err := os.Create(p)
	if err == nil {
		_, err = io.Copy(out, file)
		err = errors.Join(err, out.Close())
	}
	if err != nil {
		apiErr(w, http.StatusBadRequest, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeDaytona) permissions(w http.ResponseWriter, r *http.Request) {
	s := f.started(w, r)
	if s == nil {
		return
	}
	p, ok := f.path(w, r, s)
	if !ok {
		return
	}
	mode, err := strconv.ParseUint(r.URL.Query().Get("mode"), 8, 32)
	if err != nil {
		apiErr(w, http.StatusBadRequest, "invalid mode format")
		return
	}
	if err := os.Chmod(p, os.FileMode(mode)); err != nil {
		apiErr(w, http.StatusNotFound, err.Error())
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (f *fakeDaytona) download(w http.ResponseWriter, r *http.Request) {
	s := f.started(w, r)
	if s == nil {
		return
	}
	p, ok := f.path(w, r, s)
	if !ok {
		return
	}
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		apiErr(w, http.StatusNotFound, err.Error())
		return
	case err != nil || fi.IsDir():
		apiErr(w, http.StatusBadRequest, "path must be a file")
		return
	}
	in, err := os.Open(p)
	if err != nil {
		apiErr(w, http.StatusForbidden, err.Error())
		return
	}
	defer in.Close()
	// The daemon serves the file with gin's c.File, which honours ranges.
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), in)
}

func (f *fakeDaytona) deleteFile(w http.ResponseWriter, r *http.Request) {
	s := f.started(w, r)
	if s == nil {
		return
	}
	p, ok := f.path(w, r, s)
	if !ok {
		return
	}
	if _, err := os.Lstat(p); err != nil {
		apiErr(w, http.StatusNotFound, err.Error())
		return
	}
	remove := os.Remove
	if r.URL.Query().Get("recursive") == "true" {
		remove = os.RemoveAll
	}
	if err := remove(p); err != nil {
		apiErr(w, http.StatusBadRequest, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sandboxCount is how many sandboxes exist.
func (f *fakeDaytona) sandboxCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sandboxes)
}

// only returns the one sandbox, failing the test if there is not exactly
// one.
func (f *fakeDaytona) only() fakeSandbox {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.sandboxes) != 1 {
		f.t.Fatalf("%d sandboxes, want 1", len(f.sandboxes))
	}
	for _, s := range f.sandboxes {
		return *s
	}
	panic("unreachable")
}

// running counts the sessions and the commands still running.
func (f *fakeDaytona) running() (sessions, commands int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.sandboxes {
		for _, sess := range s.sessions {
			sessions++
			for _, c := range sess.commands {
				select {
				case <-c.done:
				default:
					commands++
				}
			}
		}
	}
	return sessions, commands
}

func (f *fakeDaytona) close() {
	f.server.Close()
	if err := f.gateway.Close(); err != nil {
		f.t.Errorf("close the SSH gateway: %v", err)
	}
	f.mu.Lock()
	var sessions []*fakeSession
	var boxes []*testgateway.Box
	for _, s := range f.sandboxes {
		sessions = append(sessions, slices.Collect(maps.Values(s.sessions))...)
		if s.box != nil {
			boxes = append(boxes, s.box)
		}
	}
	f.mu.Unlock()
	for _, sess := range sessions {
		f.kill(sess)
	}
	for _, b := range boxes {
		_ = b.Close()
	}
}
