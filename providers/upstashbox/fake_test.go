//go:build unix

package upstashbox_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
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

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/upstashbox"
)

const testKey = "box_test_key_0123456789abcdef"

// Operations of the fake API, for faults and the request log.
const (
	opCreate   = "box.create"
	opGet      = "box.get"
	opList     = "box.list"
	opDelete   = "box.delete"
	opExec     = "box.exec"
	opStream   = "box.exec-stream"
	opUpload   = "files.upload"
	opDownload = "files.download"
)

// fault makes one operation of the fake fail, lose its answer or hang.
type fault struct {
	status     int    // HTTP status of the failure; 500 when zero
	retryAfter string // the failure's Retry-After header
	after      bool   // do the operation first, then fail (the answer is lost)
	drop       bool   // do the operation, then cut the connection without an answer
	hang       bool   // do the operation, then block until the client gives up
	onHang     func() // called when a hang starts
	times      int    // 0: every time
	fired      int
}

// fakeBox is a fake of the Upstash Box REST API (v2) as Upstash publishes
// it. There is no OpenAPI document; the description it follows is the
// published SDK, which the docs name as the API's reference:
// github.com/upstash/box packages/sdk/src/client.ts and types.ts at
// commit f1cd02b14fa07b1f86febdc5342f90a28c91be90 (routes, bodies, field
// names, the X-Box-Api-Key header, {"error": ...} error bodies, labels of
// [A-Za-z0-9._:-] up to 20 characters and at most 5, the list's label
// filter and bare JSON array, the exec-stream answer: raw output, then
// "event: exit" with {"exit_code", "cpu_ns"} or "event: error" with
// {"error"}), and github.com/upstash/docs box/overall/ephemeral-box.mdx at
// commit ef0ce4387f723fa1d0bd49d29331a6ec61feb6df (ephemeral boxes: ready
// at once with status idle, ttl in seconds up to 259200, the default,
// expires_at in Unix seconds, deleted by Upstash at their TTL).
//
// Where those say nothing the fake is strict: the upload endpoint does
// not create directories, unknown create fields are refused, a missing
// file is a 404, and a command whose exec-stream client has gone keeps
// running (so crabbox must kill it itself).
//
// A box is a directory under dir (its HOME); commands are real local
// processes in their own process group, and box paths are host paths
// (confined to dir and the system's temporary directory).
type fakeBox struct {
	t     testing.TB
	dir   string
	clock clockwork.Clock
	srv   *httptest.Server
	URL   string

	mu      sync.Mutex
	boxes   map[string]*fakeBoxState
	nextID  int
	faults  map[string]*fault
	events  []string
	procs   map[*exec.Cmd]string // running commands, to their box
	closing chan struct{}
	calls   map[string]int
	// commands are the commands of exec and exec-stream calls, in order.
	commands [][]string
}

type fakeBoxState struct {
	ID, Name, Size, Runtime, Home string
	Status                        string
	Labels                        []string
	CreatedAt, ExpiresAt          time.Time
}

func newFake(t testing.TB, clock clockwork.Clock) *fakeBox {
	f := &fakeBox{
		t: t, dir: t.TempDir(), clock: clock, boxes: map[string]*fakeBoxState{},
		faults: map[string]*fault{}, procs: map[*exec.Cmd]string{}, closing: make(chan struct{}), calls: map[string]int{},
	}
	mux := http.NewServeMux()
	route := func(pattern, op string, h func(http.ResponseWriter, *http.Request)) {
		mux.HandleFunc(pattern, f.wrap(op, h))
	}
	route("POST /v2/box", opCreate, f.create)
	route("GET /v2/box", opList, f.list)
	route("GET /v2/box/{id}", opGet, f.get)
	route("DELETE /v2/box/{id}", opDelete, f.delete)
	route("POST /v2/box/{id}/exec", opExec, f.exec)
	route("POST /v2/box/{id}/exec-stream", opStream, f.execStream)
	route("POST /v2/box/{id}/files/upload", opUpload, f.upload)
	route("GET /v2/box/{id}/files/download", opDownload, f.download)
	f.srv = httptest.NewServer(mux)
	f.URL = f.srv.URL
	t.Cleanup(f.close)
	return f
}

// close ends hanging answers and every process, then the server.
func (f *fakeBox) close() {
	close(f.closing)
	f.mu.Lock()
	for id := range f.boxes {
		f.killBox(id)
	}
	for c := range f.procs {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
	}
	f.mu.Unlock()
	f.srv.Close()
}

func (f *fakeBox) fail(op string, ft fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = &ft
}

// clear removes op's fault.
func (f *fakeBox) clear(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.faults, op)
}

func (f *fakeBox) event(format string, args ...any) {
	f.events = append(f.events, fmt.Sprintf(format, args...))
}

// Events returns the mutations so far.
func (f *fakeBox) Events() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

// Calls returns how often op was asked for.
func (f *fakeBox) Calls(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// IDs returns the IDs of the boxes that exist (expiring those past their
// TTL first).
func (f *fakeBox) IDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expire()
	var out []string
	for id := range f.boxes {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// setStatus sets a box's status (an "error" box, say).
func (f *fakeBox) setStatus(id, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boxes[id].Status = status
}

// Commands returns the commands run so far.
func (f *fakeBox) Commands() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.commands)
}

// box returns a copy of a box.
func (f *fakeBox) box(id string) fakeBoxState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return *f.boxes[id]
}

// addBox puts a box into the account as someone made it.
func (f *fakeBox) addBox(name string, labels []string, ttl time.Duration) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.newBox(name, labels, "node", "small", ttl).ID
}

// addOwned puts a box as crabbox makes it into the account and returns
// its lease ID.
func (f *fakeBox) addOwned(slug string, ttl time.Duration) (string, string) {
	id := lease.NewID()
	return id, f.addBox(upstashbox.BoxName(id, slug), []string{"crabbox", id}, ttl)
}

func (f *fakeBox) newBox(name string, labels []string, runtime, size string, ttl time.Duration) *fakeBoxState {
	f.nextID++
	id := fmt.Sprintf("fake-box-%05d", f.nextID)
	home := filepath.Join(f.dir, id)
	if err := os.MkdirAll(home, 0o755); err != nil {
		f.t.Errorf("fake: %v", err)
	}
	now := f.clock.Now().Truncate(time.Second)
	b := &fakeBoxState{ID: id, Name: name, Labels: labels, Runtime: runtime, Size: size, Home: home, Status: "idle", CreatedAt: now, ExpiresAt: now.Add(ttl)}
	f.boxes[id] = b
	f.event("create %s %s", id, name)
	return b
}

// expire deletes the boxes whose TTL has passed, as Upstash does. f.mu
// is held.
func (f *fakeBox) expire() {
	now := f.clock.Now()
	for id, b := range f.boxes {
		if !now.Before(b.ExpiresAt) {
			f.killBox(id)
			delete(f.boxes, id)
			f.event("expire %s", id)
		}
	}
}

// killBox kills every process of a box: those it started and those that
// left their process group (found by their environment). f.mu is held.
func (f *fakeBox) killBox(id string) {
	for c, box := range f.procs {
		if box == id {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		}
	}
	mark := []byte("UPSTASH_FAKE_BOX=" + f.dir + "/" + id + "\x00")
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		if env, err := os.ReadFile(p); err == nil && bytes.Contains(env, mark) {
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// wrap checks the API key, expires boxes, counts the call and applies
// op's fault.
func (f *fakeBox) wrap(op string, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Box-Api-Key") != testKey {
			apiError(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		f.mu.Lock()
		f.calls[op]++
		f.expire()
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
		if !ft.after && !ft.drop && !ft.hang {
			if ft.retryAfter != "" {
				w.Header().Set("Retry-After", ft.retryAfter)
			}
			apiError(w, cmp.Or(ft.status, http.StatusInternalServerError), "injected failure of "+op)
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
			apiError(w, cmp.Or(ft.status, http.StatusInternalServerError), "injected failure after "+op)
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

func apiError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// boxJSON is a box as the API shows it (BoxData and EphemeralBoxData).
func (b *fakeBoxState) json() map[string]any {
	return map[string]any{
		"id": b.ID, "name": b.Name, "labels": b.Labels, "size": b.Size, "runtime": b.Runtime, "status": b.Status,
		"ephemeral": true, "expires_at": b.ExpiresAt.Unix(), "created_at": b.CreatedAt.Unix(), "updated_at": b.CreatedAt.Unix(),
	}
}

var (
	fakeRuntimes = []string{"node", "python", "golang", "ruby", "rust", "node-alpine", "python-alpine", "golang-alpine", "ruby-alpine", "rust-alpine"}
	fakeLabel    = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,20}$`)
)

func (f *fakeBox) create(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name      string   `json:"name"`
		Labels    []string `json:"labels"`
		Runtime   string   `json:"runtime"`
		Size      string   `json:"size"`
		Ephemeral bool     `json:"ephemeral"`
		TTL       *int64   `json:"ttl"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		apiError(w, http.StatusBadRequest, "invalid body: "+err.Error())
		return
	}
	ttl := int64(259200)
	if body.TTL != nil {
		ttl = *body.TTL
	}
	switch {
	case !body.Ephemeral:
		apiError(w, http.StatusBadRequest, "the fake makes ephemeral boxes only")
		return
	case ttl < 1 || ttl > 259200:
		apiError(w, http.StatusBadRequest, "ttl must be between 1 and 259200 seconds")
		return
	case body.Runtime != "" && !slices.Contains(fakeRuntimes, body.Runtime):
		apiError(w, http.StatusBadRequest, "invalid runtime "+body.Runtime)
		return
	case body.Size != "" && !slices.Contains([]string{"small", "medium", "large"}, body.Size):
		apiError(w, http.StatusBadRequest, "invalid size "+body.Size)
		return
	case len(body.Labels) > 5:
		apiError(w, http.StatusBadRequest, "labels: at most 5 labels")
		return
	}
	for _, l := range body.Labels {
		if !fakeLabel.MatchString(l) {
			apiError(w, http.StatusBadRequest, fmt.Sprintf("labels: label %q contains invalid characters", l))
			return
		}
	}
	f.mu.Lock()
	b := f.newBox(body.Name, body.Labels, cmp.Or(body.Runtime, "node"), cmp.Or(body.Size, "small"), time.Duration(ttl)*time.Second)
	out := b.json()
	f.mu.Unlock()
	writeJSON(w, out)
}

func (f *fakeBox) list(w http.ResponseWriter, r *http.Request) {
	label := r.URL.Query().Get("label")
	f.mu.Lock()
	var all []*fakeBoxState
	for _, b := range f.boxes {
		if label == "" || slices.Contains(b.Labels, label) {
			all = append(all, b)
		}
	}
	slices.SortFunc(all, func(a, b *fakeBoxState) int { return strings.Compare(a.ID, b.ID) })
	out := []map[string]any{}
	for _, b := range all {
		out = append(out, b.json())
	}
	f.mu.Unlock()
	writeJSON(w, out)
}

// find returns the box of the request's path, or answers 404.
func (f *fakeBox) find(w http.ResponseWriter, r *http.Request) (fakeBoxState, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[r.PathValue("id")]
	if !ok {
		apiError(w, http.StatusNotFound, "box not found")
		return fakeBoxState{}, false
	}
	return *b, true
}

func (f *fakeBox) get(w http.ResponseWriter, r *http.Request) {
	if b, ok := f.find(w, r); ok {
		writeJSON(w, b.json())
	}
}

func (f *fakeBox) delete(w http.ResponseWriter, r *http.Request) {
	b, ok := f.find(w, r)
	if !ok {
		return
	}
	f.mu.Lock()
	f.killBox(b.ID)
	delete(f.boxes, b.ID)
	f.event("delete %s", b.ID)
	f.mu.Unlock()
	writeJSON(w, map[string]string{"message": "Box deleted"})
}

// command starts a command of box b whose stdout and stderr go to out
// and errOut.
func (f *fakeBox) command(b fakeBoxState, argv []string, out, errOut io.Writer) (*exec.Cmd, error) {
	if len(argv) == 0 {
		return nil, errors.New("command is required")
	}
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir = b.Home
	c.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.Home, "UPSTASH_FAKE_BOX=" + b.Home}
	c.Stdout, c.Stderr = out, errOut
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commands = append(f.commands, slices.Clone(argv))
	if _, ok := f.boxes[b.ID]; !ok {
		return nil, errors.New("box deleted")
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	f.procs[c] = b.ID
	return c, nil
}

// wait waits for c and returns its exit code (128+N for signal N).
func (f *fakeBox) wait(c *exec.Cmd) int {
	err := c.Wait()
	f.mu.Lock()
	delete(f.procs, c)
	f.mu.Unlock()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 0
}

func readCommand(w http.ResponseWriter, r *http.Request) ([]string, bool) {
	var body struct {
		Command []string `json:"command"`
		Folder  string   `json:"folder"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Command) == 0 {
		apiError(w, http.StatusBadRequest, "command is required")
		return nil, false
	}
	return body.Command, true
}

func (f *fakeBox) exec(w http.ResponseWriter, r *http.Request) {
	b, ok := f.find(w, r)
	if !ok {
		return
	}
	argv, ok := readCommand(w, r)
	if !ok {
		return
	}
	var out, errOut bytes.Buffer
	c, err := f.command(b, argv, &out, &errOut)
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	code := f.wait(c)
	writeJSON(w, map[string]any{"exit_code": code, "output": out.String(), "error": errOut.String()})
}

// flushWriter writes to an answer and flushes it; once the client has
// gone it drops what it is given, so the command runs on.
type flushWriter struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	gone bool
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if fw.gone {
		return len(p), nil
	}
	if _, err := fw.w.Write(p); err != nil {
		fw.gone = true
		return len(p), nil
	}
	if err := http.NewResponseController(fw.w).Flush(); err != nil {
		fw.gone = true
	}
	return len(p), nil
}

func (f *fakeBox) execStream(w http.ResponseWriter, r *http.Request) {
	b, ok := f.find(w, r)
	if !ok {
		return
	}
	argv, ok := readCommand(w, r)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fw := &flushWriter{w: w}
	_ = http.NewResponseController(w).Flush()
	c, err := f.command(b, argv, fw, fw)
	if err != nil {
		fmt.Fprintf(fw, "event: error\ndata: %s\n\n", mustJSON(map[string]string{"error": err.Error()}))
		return
	}
	code := f.wait(c)
	f.mu.Lock()
	_, alive := f.boxes[b.ID]
	f.mu.Unlock()
	if !alive {
		panic(http.ErrAbortHandler) // the box went away under the command: the stream breaks
	}
	fmt.Fprintf(fw, "event: exit\ndata: %s\n\n", mustJSON(map[string]any{"exit_code": code, "cpu_ns": 0}))
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// allowed reports whether p is a path the fake lets a box touch.
func (f *fakeBox) allowed(p string) bool {
	p = filepath.Clean(p)
	return filepath.IsAbs(p) && (strings.HasPrefix(p, f.dir+"/") || strings.HasPrefix(p, filepath.Clean(os.TempDir())+"/"))
}

func (f *fakeBox) upload(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.find(w, r); !ok {
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
		apiError(w, http.StatusBadRequest, "want multipart/form-data")
		return
	}
	mr, err := r.MultipartReader()
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	var paths []string
	n := 0
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, err.Error())
			return
		}
		switch part.FormName() {
		case "paths":
			v, _ := io.ReadAll(part)
			paths = append(paths, string(v))
		case "files":
			if n >= len(paths) || !f.allowed(paths[n]) {
				apiError(w, http.StatusBadRequest, "a file without a valid path")
				return
			}
			dst, err := os.OpenFile(paths[n], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				apiError(w, http.StatusBadRequest, "cannot write "+paths[n])
				return
			}
			_, err = io.Copy(dst, part)
			dst.Close()
			if err != nil {
				apiError(w, http.StatusBadRequest, err.Error())
				return
			}
			n++
		default:
			apiError(w, http.StatusBadRequest, "unknown field "+part.FormName())
			return
		}
	}
	if n == 0 || n != len(paths) {
		apiError(w, http.StatusBadRequest, "paths and files do not match")
		return
	}
	writeJSON(w, map[string]string{"message": "Files uploaded"})
}

func (f *fakeBox) download(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.find(w, r); !ok {
		return
	}
	p := r.URL.Query().Get("folder")
	if !f.allowed(p) {
		apiError(w, http.StatusBadRequest, "invalid path")
		return
	}
	fh, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		apiError(w, http.StatusNotFound, "file not found")
		return
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	defer fh.Close()
	if st, err := fh.Stat(); err != nil || st.IsDir() {
		apiError(w, http.StatusBadRequest, "not a file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = io.Copy(w, fh)
}
