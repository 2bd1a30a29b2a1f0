//go:build unix

package vercel_test

import (
	"archive/tar"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/vercel"
)

const (
	testToken   = "vercel-test-token-0123456789"
	testTeam    = "team_test"
	testProject = "prj_test"
)

// Operations of the fake API, for faults and the request log.
const (
	opCreate = "sandbox.create"
	opGet    = "sandbox.get"
	opList   = "sandbox.list"
	opDelete = "sandbox.delete"
	opStop   = "session.stop"
	opExtend = "session.extend"
	opCmd    = "cmd.start"
	opLogs   = "cmd.logs"
	opWait   = "cmd.wait"
	opKill   = "cmd.kill"
	opWrite  = "fs.write"
	opRead   = "fs.read"
)

// fault makes one operation of the fake fail, lose its answer or hang.
type fault struct {
	status int    // HTTP status of the failure; 500 when zero
	after  bool   // do the operation first, then fail (the answer is lost)
	drop   bool   // do the operation, then cut the connection without an answer
	cut    bool   // cut the connection without doing the operation (a broken stream)
	hang   bool   // do the operation, then block until the client gives up
	onHang func() // called when a hang starts
	times  int    // 0: every time
	fired  int
}

// fakeVercel is a fake of Vercel's sandbox REST API (v2: named sandboxes,
// sessions, commands, files) following the shapes of the published
// TypeScript client. A sandbox is a directory under dir; its commands are
// real local processes (each in its own process group) whose output is the
// command's log stream. Sandbox paths are host paths, confined to dir.
// Like Vercel, it holds a session's timeout to the account's maximum
// (maxTimeout, Hobby's 45 minutes): a create or an extension asking for
// more is refused.
type fakeVercel struct {
	t     testing.TB
	dir   string
	clock clockwork.Clock
	srv   *httptest.Server
	URL   string
	// maxTimeout is the plan's maximum session duration.
	maxTimeout time.Duration

	mu        sync.Mutex
	sandboxes map[string]*fakeSandbox // by name
	nextID    int
	faults    map[string]*fault
	events    []string // mutations, in order
	created   map[string]createdAs
	closing   chan struct{}
}

// createdAs records what a create call asked for.
type createdAs struct{ nonPersistent bool }

type fakeSandbox struct {
	name, project string
	persistent    bool
	runtime       string
	vcpus         int
	tags          map[string]string
	createdAt     time.Time
	session       fakeSession
	cmds          map[string]*fakeCmd
}

type fakeSession struct {
	id, status, cwd string
	timeout         time.Duration
	startedAt       time.Time
}

type fakeCmd struct {
	id, name  string
	args      []string
	cwd       string
	startedAt time.Time
	proc      *exec.Cmd

	mu      sync.Mutex
	lines   []logEntry
	changed chan struct{} // closed and replaced on every change
	done    bool
	exit    int
}

type logEntry struct {
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

func newFake(t testing.TB, clock clockwork.Clock) *fakeVercel {
	f := &fakeVercel{
		t: t, dir: t.TempDir(), clock: clock, sandboxes: map[string]*fakeSandbox{},
		faults: map[string]*fault{}, closing: make(chan struct{}), created: map[string]createdAs{},
		maxTimeout: 45 * time.Minute,
	}
	mux := http.NewServeMux()
	route := func(pattern, op string, h func(http.ResponseWriter, *http.Request)) {
		mux.HandleFunc(pattern, f.wrap(op, h))
	}
	route("POST /v2/sandboxes", opCreate, f.create)
	route("GET /v2/sandboxes", opList, f.list)
	route("GET /v2/sandboxes/{name}", opGet, f.get)
	route("DELETE /v2/sandboxes/{name}", opDelete, f.delete)
	route("POST /v2/sandboxes/sessions/{id}/stop", opStop, f.stop)
	route("POST /v2/sandboxes/sessions/{id}/extend-timeout", opExtend, f.extend)
	route("POST /v2/sandboxes/sessions/{id}/cmd", opCmd, f.startCmd)
	route("GET /v2/sandboxes/sessions/{id}/cmd/{cmd}", opWait, f.wait)
	route("GET /v2/sandboxes/sessions/{id}/cmd/{cmd}/logs", opLogs, f.logs)
	route("POST /v2/sandboxes/sessions/{id}/cmd/{cmd}/kill", opKill, f.kill)
	route("POST /v2/sandboxes/sessions/{id}/fs/write", opWrite, f.write)
	route("POST /v2/sandboxes/sessions/{id}/fs/read", opRead, f.read)
	f.srv = httptest.NewServer(mux)
	f.URL = f.srv.URL
	t.Cleanup(f.close)
	return f
}

// close ends hanging answers and every process, then the server.
func (f *fakeVercel) close() {
	close(f.closing)
	f.mu.Lock()
	var all []*fakeCmd
	for _, s := range f.sandboxes {
		for _, c := range s.cmds {
			all = append(all, c)
		}
	}
	f.mu.Unlock()
	for _, c := range all {
		c.signal(syscall.SIGKILL)
		c.waitDone()
	}
	f.srv.Close()
}

// fail sets a fault on op.
func (f *fakeVercel) fail(op string, ft fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = &ft
}

func (f *fakeVercel) clearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = map[string]*fault{}
}

func (f *fakeVercel) event(format string, args ...any) {
	f.events = append(f.events, fmt.Sprintf(format, args...))
}

// Events returns the mutations so far.
func (f *fakeVercel) Events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// Names returns the names of the sandboxes that exist.
func (f *fakeVercel) Names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for n := range f.sandboxes {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Running returns the IDs of commands whose process has not ended.
func (f *fakeVercel) Running() []string {
	f.mu.Lock()
	var all []*fakeCmd
	for _, s := range f.sandboxes {
		for _, c := range s.cmds {
			all = append(all, c)
		}
	}
	f.mu.Unlock()
	var out []string
	for _, c := range all {
		c.mu.Lock()
		if !c.done {
			out = append(out, c.id)
		}
		c.mu.Unlock()
	}
	return out
}

// addForeign puts a sandbox that crabbox did not make into the project.
func (f *fakeVercel) addForeign(name string, tags map[string]string, timeout time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.newSandbox(name, testProject, "node24", 2, tags, timeout)
}

// addOwned puts a sandbox as crabbox makes it into the project and
// returns its lease ID.
func (f *fakeVercel) addOwned(timeout time.Duration) string {
	id := lease.NewID()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.newSandbox(vercel.SandboxName(id), testProject, "node24", 2, map[string]string{"crabbox": "true", "lease": id}, timeout)
	return id
}

// setTimeout changes a sandbox's session timeout to end now.
func (f *fakeVercel) setTimeout(name string, timeout time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes[name].session.timeout = timeout
}

// wrap checks authentication and the team, and applies op's fault.
func (f *fakeVercel) wrap(op string, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			apiError(w, http.StatusForbidden, "forbidden", "Not authorized")
			return
		}
		if r.URL.Query().Get("teamId") != testTeam {
			apiError(w, http.StatusForbidden, "forbidden", "team not accessible")
			return
		}
		f.mu.Lock()
		ft := f.faults[op]
		if ft != nil && ft.times > 0 && ft.fired >= ft.times {
			ft = nil
		}
		if ft != nil {
			ft.fired++
		}
		f.mu.Unlock()
		if ft == nil {
			h(w, r)
			return
		}
		if ft.cut {
			hangUp(w)
			return
		}
		if !ft.after && !ft.drop && !ft.hang {
			apiError(w, cmp.Or(ft.status, http.StatusInternalServerError), "injected", "injected failure of "+op)
			return
		}
		h(discard{}, r) // the operation happens, its answer is lost
		switch {
		case ft.drop:
			hangUp(w)
		case ft.hang:
			if ft.onHang != nil {
				ft.onHang()
			}
			select {
			case <-r.Context().Done():
			case <-f.closing:
			}
		default:
			apiError(w, cmp.Or(ft.status, http.StatusInternalServerError), "injected", "injected failure after "+op)
		}
	}
}

// hangUp closes the connection without an answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	}
}

// discard is a ResponseWriter that drops the answer.
type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(p []byte) (int, error) { return len(p), nil }
func (discard) WriteHeader(int)             {}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func (f *fakeVercel) newSandbox(name, project, runtime string, vcpus int, tags map[string]string, timeout time.Duration) *fakeSandbox {
	f.nextID++
	now := f.clock.Now()
	cwd := filepath.Join(f.dir, name)
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		f.t.Errorf("fake: %v", err)
	}
	s := &fakeSandbox{
		name: name, project: project, runtime: runtime, vcpus: vcpus, tags: tags, createdAt: now,
		session: fakeSession{id: fmt.Sprintf("sbx_%04d", f.nextID), status: "running", cwd: cwd, timeout: timeout, startedAt: now},
		cmds:    map[string]*fakeCmd{},
	}
	f.sandboxes[name] = s
	return s
}

// refresh stops a session whose timeout has passed, as Vercel does.
// f.mu is held.
func (f *fakeVercel) refresh(s *fakeSandbox) {
	if s.session.status == "running" && !f.clock.Now().Before(s.session.startedAt.Add(s.session.timeout)) {
		f.stopSession(s)
		f.event("timeout %s", s.name)
	}
}

// stopSession ends the session and its processes. f.mu is held.
func (f *fakeVercel) stopSession(s *fakeSandbox) {
	s.session.status = "stopped"
	for _, c := range s.cmds {
		c.signal(syscall.SIGKILL)
	}
}

func (s *fakeSandbox) sandboxJSON() map[string]any {
	out := map[string]any{
		"name": s.name, "persistent": s.persistent, "runtime": s.runtime, "vcpus": s.vcpus, "memory": 2048 * s.vcpus,
		"timeout": s.session.timeout.Milliseconds(), "createdAt": ms(s.createdAt), "updatedAt": ms(s.createdAt),
		"currentSessionId": s.session.id, "status": s.session.status, "cwd": s.session.cwd,
		"expiresAt": ms(s.session.startedAt.Add(s.session.timeout)),
	}
	if len(s.tags) > 0 {
		out["tags"] = s.tags
	}
	return out
}

func (s *fakeSandbox) sessionJSON() map[string]any {
	return map[string]any{
		"id": s.session.id, "memory": 2048 * s.vcpus, "vcpus": s.vcpus, "region": "iad1", "runtime": s.runtime,
		"timeout": s.session.timeout.Milliseconds(), "status": s.session.status,
		"requestedAt": ms(s.session.startedAt), "startedAt": ms(s.session.startedAt),
		"createdAt": ms(s.session.startedAt), "updatedAt": ms(s.session.startedAt), "cwd": s.session.cwd,
	}
}

func (f *fakeVercel) create(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ProjectID  string              `json:"projectId"`
		Name       string              `json:"name"`
		Runtime    string              `json:"runtime"`
		Timeout    int64               `json:"timeout"`
		Resources  struct{ VCPUs int } `json:"resources"`
		Persistent *bool               `json:"persistent"`
		Tags       map[string]string   `json:"tags"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	switch {
	case body.ProjectID != testProject:
		apiError(w, http.StatusNotFound, "not_found", "project not found")
		return
	case body.Name == "" || body.Runtime == "" || body.Timeout <= 0 || body.Resources.VCPUs < 1:
		apiError(w, http.StatusBadRequest, "bad_request", "name, runtime, timeout and resources.vcpus are required")
		return
	case len(body.Tags) > 5:
		apiError(w, http.StatusBadRequest, "bad_request", "at most 5 tags")
		return
	case time.Duration(body.Timeout)*time.Millisecond > f.maxTimeout:
		apiError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("timeout exceeds the maximum allowed for your account (%dms)", f.maxTimeout.Milliseconds()))
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.sandboxes[body.Name]; ok {
		apiError(w, http.StatusConflict, "conflict", "a sandbox with this name exists")
		return
	}
	s := f.newSandbox(body.Name, body.ProjectID, body.Runtime, body.Resources.VCPUs, body.Tags, time.Duration(body.Timeout)*time.Millisecond)
	s.persistent = body.Persistent == nil || *body.Persistent
	f.created[s.name] = createdAs{nonPersistent: !s.persistent}
	f.event("create %s", s.name)
	reply(w, map[string]any{"sandbox": s.sandboxJSON(), "session": s.sessionJSON(), "routes": []any{}})
}

func (f *fakeVercel) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[r.PathValue("name")]
	if !ok || r.URL.Query().Get("projectId") != s.project {
		apiError(w, http.StatusNotFound, "not_found", "sandbox not found")
		return
	}
	f.refresh(s)
	reply(w, map[string]any{"sandbox": s.sandboxJSON(), "session": s.sessionJSON(), "routes": []any{}})
}

func (f *fakeVercel) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("limit"))
	if err != nil || limit < 1 {
		limit = 20
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for name, s := range f.sandboxes {
		if s.project != q.Get("project") || !strings.HasPrefix(name, q.Get("namePrefix")) || name <= q.Get("cursor") {
			continue
		}
		if !hasTags(s.tags, q["tags"]) {
			continue
		}
		names = append(names, name)
	}
	slices.Sort(names)
	var next *string
	if len(names) > limit {
		names = names[:limit]
		next = &names[limit-1]
	}
	page := []any{}
	for _, n := range names {
		f.refresh(f.sandboxes[n])
		page = append(page, f.sandboxes[n].sandboxJSON())
	}
	reply(w, map[string]any{"sandboxes": page, "pagination": map[string]any{"count": len(page), "next": next}})
}

func hasTags(tags map[string]string, filters []string) bool {
	for _, fl := range filters {
		k, v, _ := strings.Cut(fl, ":")
		if tags[k] != v {
			return false
		}
	}
	return true
}

func (f *fakeVercel) delete(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sandboxes[r.PathValue("name")]
	if !ok || r.URL.Query().Get("projectId") != s.project {
		apiError(w, http.StatusNotFound, "not_found", "sandbox not found")
		return
	}
	f.stopSession(s)
	delete(f.sandboxes, s.name)
	f.event("delete %s", s.name)
	reply(w, map[string]any{"sandbox": s.sandboxJSON()})
}

// session finds a running session, answering 404 or 410 if there is none.
// f.mu is held.
func (f *fakeVercel) session(w http.ResponseWriter, r *http.Request) *fakeSandbox {
	for _, s := range f.sandboxes {
		if s.session.id == r.PathValue("id") {
			f.refresh(s)
			if s.session.status != "running" {
				apiError(w, http.StatusGone, "sandbox_stopped", "the session is "+s.session.status)
				return nil
			}
			return s
		}
	}
	apiError(w, http.StatusNotFound, "not_found", "session not found")
	return nil
}

func (f *fakeVercel) stop(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.session(w, r)
	if s == nil {
		return
	}
	f.stopSession(s)
	f.event("stop %s", s.name)
	reply(w, map[string]any{"session": s.sessionJSON(), "sandbox": s.sandboxJSON()})
}

func (f *fakeVercel) extend(w http.ResponseWriter, r *http.Request) {
	var body struct{ Duration int64 }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Duration <= 0 {
		apiError(w, http.StatusBadRequest, "bad_request", "duration must be positive")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.session(w, r)
	if s == nil {
		return
	}
	if s.session.timeout+time.Duration(body.Duration)*time.Millisecond > f.maxTimeout {
		apiError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("the total timeout cannot exceed the maximum allowed for your account (%dms)", f.maxTimeout.Milliseconds()))
		return
	}
	s.session.timeout += time.Duration(body.Duration) * time.Millisecond
	f.event("extend %s by %dms", s.name, body.Duration)
	reply(w, map[string]any{"session": s.sessionJSON()})
}

// confine returns p if it is an absolute path inside the fake's directory.
func (f *fakeVercel) confine(p string) (string, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || (p != f.dir && !strings.HasPrefix(p, f.dir+"/")) {
		return "", fmt.Errorf("path %q is outside the sandbox", p)
	}
	return p, nil
}

func (f *fakeVercel) startCmd(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Cwd     string            `json:"cwd"`
		Env     map[string]string `json:"env"`
		Sudo    bool              `json:"sudo"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Command == "" {
		apiError(w, http.StatusBadRequest, "bad_request", "command is required")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.session(w, r)
	if s == nil {
		return
	}
	cwd := cmp.Or(body.Cwd, s.session.cwd)
	if _, err := f.confine(cwd); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	f.nextID++
	c := &fakeCmd{
		id: fmt.Sprintf("cmd_%04d", f.nextID), name: body.Command, args: body.Args, cwd: cwd,
		startedAt: f.clock.Now(), changed: make(chan struct{}),
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.session.cwd}
	for k, v := range body.Env {
		env = append(env, k+"="+v)
	}
	c.proc = exec.Command(body.Command, body.Args...)
	c.proc.Dir, c.proc.Env = cwd, env
	c.proc.Stdout, c.proc.Stderr = logWriter{c, "stdout"}, logWriter{c, "stderr"}
	c.proc.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.proc.WaitDelay = 5 * time.Second
	s.cmds[c.id] = c
	if err := c.proc.Start(); err != nil {
		c.append("stderr", err.Error()+"\n")
		c.finish(127)
	} else {
		go func() {
			err := c.proc.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					code = 128 + int(ws.Signal())
				}
			}
			c.finish(code)
		}()
	}
	f.event("cmd %s %s", s.name, body.Command)
	reply(w, map[string]any{"command": c.json()})
}

type logWriter struct {
	c      *fakeCmd
	stream string
}

func (l logWriter) Write(p []byte) (int, error) {
	l.c.append(l.stream, string(p))
	return len(p), nil
}

func (c *fakeCmd) append(stream, data string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, logEntry{stream, data})
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *fakeCmd) finish(code int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done, c.exit = true, code
	close(c.changed)
	c.changed = make(chan struct{})
}

// since returns the log lines from i on, whether the command has ended and
// a channel closed on the next change.
func (c *fakeCmd) since(i int) ([]logEntry, bool, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines[i:]), c.done, c.changed
}

func (c *fakeCmd) waitDone() {
	for {
		_, done, changed := c.since(0)
		if done {
			return
		}
		<-changed
	}
}

func (c *fakeCmd) signal(sig syscall.Signal) {
	c.mu.Lock()
	done := c.done
	c.mu.Unlock()
	if !done && c.proc.Process != nil {
		_ = syscall.Kill(-c.proc.Process.Pid, sig)
	}
}

func (c *fakeCmd) json() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]any{"id": c.id, "name": c.name, "args": c.args, "cwd": c.cwd, "startedAt": ms(c.startedAt), "exitCode": nil}
	if c.done {
		out["exitCode"] = c.exit
	}
	return out
}

// command finds a command of a session, running or not. f.mu is held.
func (f *fakeVercel) command(w http.ResponseWriter, r *http.Request) *fakeCmd {
	for _, s := range f.sandboxes {
		if s.session.id == r.PathValue("id") {
			if c, ok := s.cmds[r.PathValue("cmd")]; ok {
				return c
			}
		}
	}
	apiError(w, http.StatusNotFound, "not_found", "command not found")
	return nil
}

func (f *fakeVercel) lockedCommand(w http.ResponseWriter, r *http.Request) *fakeCmd {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.command(w, r)
}

func (f *fakeVercel) wait(w http.ResponseWriter, r *http.Request) {
	c := f.lockedCommand(w, r)
	if c == nil {
		return
	}
	for r.URL.Query().Get("wait") == "true" {
		_, done, changed := c.since(0)
		if done {
			break
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-f.closing:
			return
		}
	}
	reply(w, map[string]any{"command": c.json()})
}

func (f *fakeVercel) logs(w http.ResponseWriter, r *http.Request) {
	c := f.lockedCommand(w, r)
	if c == nil {
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	flush := http.NewResponseController(w).Flush
	for i := 0; ; {
		lines, done, changed := c.since(i)
		for _, l := range lines {
			_ = enc.Encode(l)
		}
		i += len(lines)
		_ = flush()
		if done {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-f.closing:
			return
		}
	}
}

func (f *fakeVercel) kill(w http.ResponseWriter, r *http.Request) {
	var body struct{ Signal int }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Signal < 1 || body.Signal > 64 {
		apiError(w, http.StatusBadRequest, "bad_request", "signal must be a signal number")
		return
	}
	c := f.lockedCommand(w, r)
	if c == nil {
		return
	}
	c.signal(syscall.Signal(body.Signal))
	f.mu.Lock()
	f.event("kill %s %d", c.id, body.Signal)
	f.mu.Unlock()
	reply(w, map[string]any{"command": c.json()})
}

func (f *fakeVercel) write(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Content-Type") != "application/gzip" {
		apiError(w, http.StatusBadRequest, "bad_request", "want application/gzip")
		return
	}
	f.mu.Lock()
	s := f.session(w, r)
	f.mu.Unlock()
	if s == nil {
		return
	}
	root := r.Header.Get("X-Cwd")
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		p, err := f.confine(filepath.Join(root, h.Name))
		if err == nil {
			err = os.MkdirAll(filepath.Dir(p), 0o755)
		}
		if err == nil {
			err = writeFile(p, tr, os.FileMode(h.Mode).Perm())
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad_request", err.Error())
			return
		}
		f.mu.Lock()
		f.event("write %s", p)
		f.mu.Unlock()
	}
	reply(w, map[string]any{})
}

func writeFile(p string, r io.Reader, mode os.FileMode) error {
	file, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(file, r)
	return errors.Join(err, file.Chmod(mode), file.Close())
}

func (f *fakeVercel) read(w http.ResponseWriter, r *http.Request) {
	var body struct{ Path string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	f.mu.Lock()
	s := f.session(w, r)
	f.mu.Unlock()
	if s == nil {
		return
	}
	p, err := f.confine(body.Path)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	file, err := os.Open(p)
	if err != nil {
		apiError(w, http.StatusNotFound, "file_not_found", "no such file")
		return
	}
	defer file.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, file)
}
