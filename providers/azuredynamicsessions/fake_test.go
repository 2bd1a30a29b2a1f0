//go:build unix

package azuredynamicsessions_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// fakePool is a session pool's management endpoint, written from the
// published description of the data-plane API: azure-rest-api-specs,
// specification/app/data-plane/Microsoft.App.DynamicSessions/preview/2025-10-02-preview/DynamicSessions.json
// at commit 0bb69d8e7aebc8d4e6272e9f12dad801427e678f (paths /executions,
// /files, /files/{name}, /files/{name}/content, /session, /listSessions;
// the identifier and api-version query parameters; the Session,
// SessionCodeExecutionResource, SessionResourceFile and
// Azure.Core.Foundations.ErrorResponse shapes; its examples
// SessionManagement_Get, ListSessions_Get, SessionResourceFiles_Upload and
// CodeExecution_Execute_Sync), and from Microsoft Learn's "Use session
// pools in Azure Container Apps" (articles/container-apps/session-pool.md
// of MicrosoftDocs/azure-docs at 03e5750af10b23b5ba437d5b333ec5e9437844f9:
// a session is allocated by the first request naming its identifier, the
// cooldown period ends a session that no request reached for that long,
// container type Shell, files live in /mnt/data).
//
// It is a Shell pool: an execution's code runs with the local sh, in a
// directory of the session standing for /mnt/data (the path /mnt/data in
// the code is replaced by it, and HOME is a directory of the session).
// Ending a session kills the process groups crabbox's runs recorded.
// Only Synchronous executions are served.
type fakePool struct {
	t        *testing.T
	srv      *httptest.Server
	clock    clockwork.Clock
	cooldown time.Duration
	token    string
	root     string

	mu       sync.Mutex
	sessions map[string]*fakeSession
	faults   []fakeFault
	requests []string // method and path of each request
	pageSize int
}

type fakeSession struct {
	id                 string
	dir                string
	created, lastTouch time.Time
}

// fakeFault answers the next request whose path it matches with status
// (and Retry-After, if set).
type fakeFault struct {
	path       string
	status     int
	retryAfter string
}

const (
	fakeToken      = "fake-entra-token"
	fakeAPIVersion = "2025-10-02-preview"
)

var identifierPattern = regexp.MustCompile("^[a-zA-Z0-9_|}{\\[\\]:\"\";'<>?/.,@#$%^&*()_\\-+=!~`]{4,128}$")

func newFake(t *testing.T, clock clockwork.Clock, cooldown time.Duration) *fakePool {
	t.Helper()
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("the fake pool runs executions with sh")
	}
	f := &fakePool{t: t, clock: clock, cooldown: cooldown, token: fakeToken, root: t.TempDir(),
		sessions: map[string]*fakeSession{}, pageSize: 2}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(func() {
		f.srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for id := range f.sessions {
			f.endLocked(id)
		}
	})
	return f
}

func (f *fakePool) URL() string {
	return f.srv.URL + "/subscriptions/sub/resourceGroups/rg/sessionPools/pool"
}

// fail makes the next n requests to path (all paths when empty) answer
// status with Retry-After retryAfter.
func (f *fakePool) fail(path string, n, status int, retryAfter string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for range n {
		f.faults = append(f.faults, fakeFault{path: path, status: status, retryAfter: retryAfter})
	}
}

func (f *fakePool) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// identifiers returns the live sessions' identifiers, sorted.
func (f *fakePool) identifiers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for id := range f.sessions {
		if f.liveLocked(id) != nil {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// end ends a session as the pool would (cooldown, or deleted elsewhere).
func (f *fakePool) end(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endLocked(id)
}

// create makes a session of identifier id as another client would.
func (f *fakePool) create(id string) *fakeSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessionLocked(id, true)
}

func (f *fakePool) endLocked(id string) {
	s := f.sessions[id]
	if s == nil {
		return
	}
	delete(f.sessions, id)
	kills, _ := filepath.Glob(filepath.Join(s.dir, "data", ".crabbox", "runs", "*", "kill"))
	for _, k := range kills {
		b, _ := os.ReadFile(k)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != 0 && pid != -1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = os.RemoveAll(s.dir)
}

// liveLocked returns session id unless it is missing or its cooldown has
// passed (then it ends it).
func (f *fakePool) liveLocked(id string) *fakeSession {
	s := f.sessions[id]
	if s == nil {
		return nil
	}
	if !f.clock.Now().Before(s.lastTouch.Add(f.cooldown)) {
		f.endLocked(id)
		return nil
	}
	return s
}

// sessionLocked returns session id, touched, allocating it if create.
func (f *fakePool) sessionLocked(id string, create bool) *fakeSession {
	s := f.liveLocked(id)
	now := f.clock.Now().UTC()
	if s == nil {
		if !create {
			return nil
		}
		var b [6]byte
		_, _ = rand.Read(b[:])
		s = &fakeSession{id: id, dir: filepath.Join(f.root, hex.EncodeToString(b[:])), created: now}
		for _, d := range []string{"data", "home"} {
			if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
				f.t.Errorf("fake pool: %v", err)
			}
		}
		f.sessions[id] = s
	}
	s.lastTouch = now
	return s
}

func (f *fakePool) sessionJSON(s *fakeSession) map[string]any {
	return map[string]any{
		"identifier": s.id, "createdAt": s.created.Format(time.RFC3339Nano), "lastAccessedAt": s.lastTouch.Format(time.RFC3339Nano),
		"expireAt": s.lastTouch.Add(f.cooldown).Format(time.RFC3339Nano), "etag": "etag-" + filepath.Base(s.dir),
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError answers an Azure.Core.Foundations.ErrorResponse.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("x-ms-error-code", code)
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

func (f *fakePool) serve(w http.ResponseWriter, r *http.Request) {
	base := "/subscriptions/sub/resourceGroups/rg/sessionPools/pool"
	p, ok := strings.CutPrefix(r.URL.Path, base)
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+p)
	for i, ft := range f.faults {
		if ft.path == "" || ft.path == p {
			f.faults = append(f.faults[:i], f.faults[i+1:]...)
			f.mu.Unlock()
			if ft.retryAfter != "" {
				w.Header().Set("Retry-After", ft.retryAfter)
			}
			apiError(w, ft.status, "Injected", "injected by the test")
			return
		}
	}
	f.mu.Unlock()
	q := r.URL.Query()
	switch {
	case !ok:
		apiError(w, http.StatusNotFound, "NotFound", "no such pool")
		return
	case r.Header.Get("Authorization") != "Bearer "+f.token:
		apiError(w, http.StatusUnauthorized, "Unauthorized", "missing or wrong bearer token")
		return
	case q.Get("api-version") != fakeAPIVersion:
		apiError(w, http.StatusBadRequest, "UnsupportedApiVersion", fmt.Sprintf("api-version %q is not supported", q.Get("api-version")))
		return
	}
	if p == "/listSessions" && r.Method == http.MethodGet {
		f.listSessions(w, r)
		return
	}
	id := q.Get("identifier")
	if !identifierPattern.MatchString(id) {
		apiError(w, http.StatusBadRequest, "InvalidIdentifier", fmt.Sprintf("identifier %q does not match the pattern", id))
		return
	}
	switch {
	case p == "/session" && (r.Method == http.MethodGet || r.Method == http.MethodDelete):
		f.mu.Lock()
		s := f.sessionLocked(id, false)
		if s == nil {
			f.mu.Unlock()
			apiError(w, http.StatusNotFound, "SessionNotFound", "session "+id+" not found")
			return
		}
		if r.Method == http.MethodDelete {
			f.endLocked(id)
			f.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		body := f.sessionJSON(s)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, body)
	case p == "/executions" && r.Method == http.MethodPost:
		f.execute(w, r, f.touch(id))
	case p == "/files" && r.Method == http.MethodPost:
		f.upload(w, r, f.touch(id))
	case strings.HasPrefix(p, "/files/"):
		f.file(w, r, f.touch(id), strings.TrimPrefix(p, "/files/"))
	default:
		apiError(w, http.StatusNotFound, "NotFound", r.Method+" "+p+" is not an operation of the API")
	}
}

// touch returns session id, allocating it: any request but /session's
// does.
func (f *fakePool) touch(id string) *fakeSession {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sessionLocked(id, true)
}

func (f *fakePool) listSessions(w http.ResponseWriter, r *http.Request) {
	skip := 0
	if v := r.URL.Query().Get("skip"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			apiError(w, http.StatusBadRequest, "InvalidSkip", "skip "+v+" is not a number")
			return
		}
		skip = n
	}
	f.mu.Lock()
	var ids []string
	for id := range f.sessions {
		if f.liveLocked(id) != nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	page := []map[string]any{}
	for i := skip; i < len(ids) && i < skip+f.pageSize; i++ {
		page = append(page, f.sessionJSON(f.sessions[ids[i]]))
	}
	more := skip+f.pageSize < len(ids)
	f.mu.Unlock()
	body := map[string]any{"sessions": page}
	if more {
		body["nextLink"] = fmt.Sprintf("%s/listSessions?api-version=%s&skip=%d", f.URL(), fakeAPIVersion, skip+f.pageSize)
	}
	writeJSON(w, http.StatusOK, body)
}

// dataPath maps a path of the file API (relative to /mnt/data) into the
// session, refusing one that leaves it.
func dataPath(s *fakeSession, dir, name string) (string, bool) {
	p := path.Clean("/" + path.Join(dir, name))
	if strings.Contains(name, "/") {
		return "", false
	}
	return filepath.Join(s.dir, "data", filepath.FromSlash(p)), true
}

func (f *fakePool) upload(w http.ResponseWriter, r *http.Request, s *fakeSession) {
	file, hdr, err := r.FormFile("file")
	if err != nil {
		apiError(w, http.StatusBadRequest, "InvalidRequest", "no multipart file: "+err.Error())
		return
	}
	defer file.Close()
	dst, ok := dataPath(s, r.URL.Query().Get("path"), hdr.Filename)
	if !ok {
		apiError(w, http.StatusBadRequest, "InvalidPath", "bad file name")
		return
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		apiError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	out, err := os.Create(dst)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	n, err := io.Copy(out, file)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"name": hdr.Filename, "type": "File", "contentType": "application/octet-stream", "sizeInBytes": n,
		"lastModifiedAt": f.clock.Now().UTC().Format(time.RFC3339Nano), "directory": r.URL.Query().Get("path"),
	})
}

func (f *fakePool) file(w http.ResponseWriter, r *http.Request, s *fakeSession, rest string) {
	name, content := strings.CutSuffix(rest, "/content")
	p, ok := dataPath(s, r.URL.Query().Get("path"), name)
	if !ok {
		apiError(w, http.StatusBadRequest, "InvalidPath", "bad file name")
		return
	}
	switch {
	case content && r.Method == http.MethodGet:
		b, err := os.ReadFile(p)
		if err != nil {
			apiError(w, http.StatusNotFound, "FileNotFound", "file "+name+" not found")
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(b)
	case !content && r.Method == http.MethodDelete:
		if err := os.Remove(p); err != nil {
			apiError(w, http.StatusNotFound, "FileNotFound", "file "+name+" not found")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusNotFound, "NotFound", r.Method+" is not served for files here")
	}
}

func (f *fakePool) execute(w http.ResponseWriter, r *http.Request, s *fakeSession) {
	var req struct {
		CodeInputType    string `json:"codeInputType"`
		ExecutionType    string `json:"executionType"`
		Code             string `json:"code"`
		TimeoutInSeconds int    `json:"timeoutInSeconds"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "InvalidRequest", "unreadable body: "+err.Error())
		return
	}
	switch {
	case req.CodeInputType != "Inline":
		apiError(w, http.StatusBadRequest, "InvalidRequest", "codeInputType "+req.CodeInputType+" is not served by the fake")
		return
	case req.ExecutionType != "Synchronous":
		apiError(w, http.StatusBadRequest, "InvalidRequest", "executionType "+req.ExecutionType+" is not served by the fake")
		return
	case req.TimeoutInSeconds <= 0 || req.Code == "":
		apiError(w, http.StatusBadRequest, "InvalidRequest", "code and timeoutInSeconds are required")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(req.TimeoutInSeconds)*time.Second)
	defer cancel()
	data := filepath.Join(s.dir, "data")
	cmd := exec.CommandContext(ctx, "sh", "-c", strings.ReplaceAll(req.Code, "/mnt/data", data))
	cmd.Dir = data
	cmd.Env = []string{"HOME=" + filepath.Join(s.dir, "home"), "PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	status := "Succeeded"
	if ctx.Err() != nil {
		status = "Failed"
	}
	_ = err // a script's exit status is not part of the answer
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	w.Header().Set("operation-id", id)
	body := map[string]any{
		"id": id, "identifier": s.id, "executionType": "Synchronous", "status": status,
		"result": map[string]any{"stdout": stdout.String(), "stderr": stderr.String(), "executionResult": "",
			"executionTimeInMilliseconds": time.Since(start).Milliseconds()},
	}
	if status == "Failed" {
		body["error"] = map[string]any{"error": map[string]any{"code": "ExecutionTimeout", "message": "the execution timed out"}}
	}
	writeJSON(w, http.StatusOK, body)
}
