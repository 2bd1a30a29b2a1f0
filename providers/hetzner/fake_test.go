package hetzner_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

const testToken = "test-token-0123456789"

// Operations of the fake API, for faults and the request log.
const (
	opKeyCreate    = "key.create"
	opKeyList      = "key.list"
	opKeyDelete    = "key.delete"
	opServerCreate = "server.create"
	opServerList   = "server.list"
	opServerGet    = "server.get"
	opServerUpdate = "server.update"
	opServerDelete = "server.delete"
	opCatalog      = "catalog" // server types, system images by name, locations
	opImageCreate  = "server.create_image"
	opRebuild      = "server.rebuild"
	opImageList    = "image.list"
	opImageGet     = "image.get"
	opImageDelete  = "image.delete"
	opActionList   = "action.list"
)

// fault makes one operation of the fake fail or hang.
type fault struct {
	code   string // Hetzner error code; "service_error" when empty
	status int    // HTTP status; 500 when zero
	hang   bool   // block until the client gives up
	after  bool   // do the operation first, then fail or hang (the answer is lost)
	onHang func() // called when a hang starts
	times  int    // 0: every time
	fired  int
}

// fakeAPI is a fake Hetzner Cloud API: servers, SSH keys, snapshot images,
// actions, label selectors and errors, with each server's box served by a
// cloudtest fleet (with disks) from its user data. A snapshot is a copy of
// the box's disk; a server created or rebuilt from it starts with a copy.
type fakeAPI struct {
	t     testing.TB
	fleet *cloudtest.Fleet
	URL   string

	mu       sync.Mutex
	nextID   int64
	servers  map[int64]*fakeServer
	keys     map[int64]schema.SSHKey
	images   map[int64]*schema.Image // snapshots
	actions  map[int64]*fakeAction
	events   []string          // mutations, in order
	creates  []string          // "type/location" of every create attempt
	faults   map[string]*fault // by operation
	capacity map[string]string // "type/location" -> error code
	noBoot   bool              // servers never serve SSH
	block    []int             // SSH ports of new boxes that refuse connections
	dead     bool              // every request fails (the process was killed)
	onGet    func(s *schema.Server)
}

type fakeServer struct {
	s        schema.Server
	userData string
}

// fakeAction is an action that is running until it is first looked at;
// done then makes its effect.
type fakeAction struct {
	a    schema.Action
	done func()
}

// installedDir is the box directory outside the work root that the
// conformance suite writes as installed software; every fake box has it
// on its disk.
const installedDir = "/opt/crabbox-fake/installed"

// newFakeAPI returns a fake API whose boxes have disks with installedDir.
func newFakeAPI(t testing.TB) *fakeAPI {
	fleet := cloudtest.NewFleet(t)
	fleet.UseDisks(t, installedDir)
	return newFakeAPIOf(t, fleet)
}

// newFakeAPIOf is newFakeAPI with the servers' boxes served by fleet.
func newFakeAPIOf(t testing.TB, fleet *cloudtest.Fleet) *fakeAPI {
	f := &fakeAPI{
		t: t, fleet: fleet, nextID: 100,
		servers: map[int64]*fakeServer{}, keys: map[int64]schema.SSHKey{},
		images: map[int64]*schema.Image{}, actions: map[int64]*fakeAction{},
		faults: map[string]*fault{}, capacity: map[string]string{},
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeAPI) setFault(op string, ft fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = &ft
}

func (f *fakeAPI) kill(dead bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead = dead
}

func (f *fakeAPI) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeAPI) attempts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates)
}

// serverList returns copies of the servers, by ID.
func (f *fakeAPI) serverList() []schema.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []schema.Server
	for _, id := range slices.Sorted(maps.Keys(f.servers)) {
		s := f.servers[id].s
		s.Labels = maps.Clone(s.Labels)
		out = append(out, s)
	}
	return out
}

func (f *fakeAPI) keyList() []schema.SSHKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []schema.SSHKey
	for _, id := range slices.Sorted(maps.Keys(f.keys)) {
		out = append(out, f.keys[id])
	}
	return out
}

func (f *fakeAPI) userData(id int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[id].userData
}

// addServer puts a server into the fake directly (one made by someone
// else), running and without a box.
func (f *fakeAPI) addServer(name string, labels map[string]string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	id := f.nextID
	s := schema.Server{ID: id, Name: name, Status: "running", Created: time.Now(), Labels: labels}
	s.PublicNet.IPv4.IP = f.fleet.NewAddress()
	f.servers[id] = &fakeServer{s: s}
	return id
}

func (f *fakeAPI) addKey(name string, labels map[string]string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	f.keys[f.nextID] = schema.SSHKey{ID: f.nextID, Name: name, Labels: labels, PublicKey: "ssh-ed25519 AAAA"}
	return f.nextID
}

// imageList returns copies of the snapshot images, by ID.
func (f *fakeAPI) imageList() []schema.Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []schema.Image
	for _, id := range slices.Sorted(maps.Keys(f.images)) {
		img := *f.images[id]
		img.Labels = maps.Clone(img.Labels)
		out = append(out, img)
	}
	return out
}

// addImage puts an available snapshot into the fake directly (one made
// by someone else), with no disk image.
func (f *fakeAPI) addImage(labels map[string]string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextID++
	now := time.Now()
	f.images[f.nextID] = &schema.Image{ID: f.nextID, Status: "available", Type: "snapshot", Labels: labels, Created: &now}
	return f.nextID
}

// imageName is the fleet's name of the disk image of snapshot id.
func imageName(id int64) string { return "hetzner-image-" + strconv.FormatInt(id, 10) }

var (
	serverPath = regexp.MustCompile(`^/servers/(\d+)$`)
	actionPath = regexp.MustCompile(`^/servers/(\d+)/actions/(create_image|rebuild)$`)
	keyPath    = regexp.MustCompile(`^/ssh_keys/(\d+)$`)
	imagePath  = regexp.MustCompile(`^/images/(\d+)$`)
)

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		writeError(w, http.StatusUnauthorized, "unauthorized", "unable to authenticate")
		return
	}
	// Reading the whole body lets the server notice a client that gives
	// up (it watches the connection only once the body is consumed).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	op, id := route(r)
	if op == "" {
		writeError(w, http.StatusNotFound, "not_found", "no route "+r.Method+" "+r.URL.Path)
		return
	}
	f.mu.Lock()
	dead := f.dead
	ft := f.faults[op]
	if ft != nil && ft.times > 0 && ft.fired >= ft.times {
		ft = nil
	}
	if ft != nil {
		ft.fired++
	}
	f.mu.Unlock()
	if dead {
		writeError(w, http.StatusServiceUnavailable, "service_error", "the process that made this request is dead")
		return
	}
	if ft == nil {
		f.serve(w, r, op, id)
		return
	}
	if ft.after {
		f.serve(httptest.NewRecorder(), r, op, id) // done, but the answer is lost
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if ft.hang {
		if ft.onHang != nil {
			ft.onHang()
		}
		<-r.Context().Done()
		return
	}
	code, status := ft.code, ft.status
	if code == "" {
		code = "service_error"
	}
	if status == 0 {
		status = http.StatusInternalServerError
	}
	writeError(w, status, code, "injected failure of "+op)
}

func route(r *http.Request) (op string, id int64) {
	p := r.URL.Path
	if m := serverPath.FindStringSubmatch(p); m != nil {
		id, _ = strconv.ParseInt(m[1], 10, 64)
		switch r.Method {
		case http.MethodGet:
			return opServerGet, id
		case http.MethodPut:
			return opServerUpdate, id
		case http.MethodDelete:
			return opServerDelete, id
		}
	}
	if m := actionPath.FindStringSubmatch(p); m != nil && r.Method == http.MethodPost {
		id, _ = strconv.ParseInt(m[1], 10, 64)
		if m[2] == "rebuild" {
			return opRebuild, id
		}
		return opImageCreate, id
	}
	if m := imagePath.FindStringSubmatch(p); m != nil {
		id, _ = strconv.ParseInt(m[1], 10, 64)
		switch r.Method {
		case http.MethodGet:
			return opImageGet, id
		case http.MethodDelete:
			return opImageDelete, id
		}
	}
	if m := keyPath.FindStringSubmatch(p); m != nil && r.Method == http.MethodDelete {
		id, _ = strconv.ParseInt(m[1], 10, 64)
		return opKeyDelete, id
	}
	switch {
	case p == "/servers" && r.Method == http.MethodPost:
		return opServerCreate, 0
	case p == "/servers" && r.Method == http.MethodGet:
		return opServerList, 0
	case p == "/ssh_keys" && r.Method == http.MethodPost:
		return opKeyCreate, 0
	case p == "/ssh_keys" && r.Method == http.MethodGet:
		return opKeyList, 0
	case p == "/images" && r.Method == http.MethodGet && !r.URL.Query().Has("name"):
		return opImageList, 0
	case (p == "/server_types" || p == "/images" || p == "/locations") && r.Method == http.MethodGet:
		return opCatalog, 0
	case p == "/actions" && r.Method == http.MethodGet:
		return opActionList, 0
	}
	return "", 0
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request, op string, id int64) {
	switch op {
	case opCatalog:
		serveCatalog(w, r)
	case opKeyCreate:
		var req schema.SSHKeyCreateRequest
		if !decode(w, r, &req) {
			return
		}
		f.createKey(w, req)
	case opKeyList:
		sel, ok := parseSelector(w, r)
		if !ok {
			return
		}
		var out schema.SSHKeyListResponse
		for _, k := range f.keyList() {
			if sel.matches(k.Labels) {
				out.SSHKeys = append(out.SSHKeys, k)
			}
		}
		writeJSON(w, http.StatusOK, out)
	case opKeyDelete:
		f.mu.Lock()
		_, ok := f.keys[id]
		delete(f.keys, id)
		if ok {
			f.events = append(f.events, fmt.Sprintf("delete key %d", id))
		}
		f.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "not_found", "ssh key not found")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case opServerCreate:
		var req schema.ServerCreateRequest
		if !decode(w, r, &req) {
			return
		}
		f.createServer(w, req)
	case opServerList:
		sel, ok := parseSelector(w, r)
		if !ok {
			return
		}
		out := schema.ServerListResponse{Servers: []schema.Server{}}
		for _, s := range f.serverList() {
			if sel.matches(s.Labels) {
				out.Servers = append(out.Servers, s)
			}
		}
		writeJSON(w, http.StatusOK, out)
	case opServerGet:
		f.mu.Lock()
		fs := f.servers[id]
		var s schema.Server
		if fs != nil {
			if fs.s.Status == "initializing" {
				fs.s.Status = "running" // booted by the first look
			}
			if f.onGet != nil {
				f.onGet(&fs.s)
			}
			s = fs.s
			s.Labels = maps.Clone(s.Labels)
		}
		f.mu.Unlock()
		if fs == nil {
			writeError(w, http.StatusNotFound, "not_found", "server not found")
			return
		}
		writeJSON(w, http.StatusOK, schema.ServerGetResponse{Server: s})
	case opServerUpdate:
		var req schema.ServerUpdateRequest
		if !decode(w, r, &req) {
			return
		}
		if req.Labels != nil {
			if msg := checkLabels(*req.Labels); msg != "" {
				writeError(w, http.StatusBadRequest, "invalid_input", msg)
				return
			}
		}
		f.mu.Lock()
		fs := f.servers[id]
		var s schema.Server
		if fs != nil && req.Labels != nil {
			fs.s.Labels = maps.Clone(*req.Labels)
			f.events = append(f.events, fmt.Sprintf("label server %d state=%s", id, fs.s.Labels["state"]))
			s = fs.s
			s.Labels = maps.Clone(s.Labels)
		}
		f.mu.Unlock()
		if fs == nil {
			writeError(w, http.StatusNotFound, "not_found", "server not found")
			return
		}
		writeJSON(w, http.StatusOK, schema.ServerUpdateResponse{Server: s})
	case opServerDelete:
		f.mu.Lock()
		fs := f.servers[id]
		delete(f.servers, id)
		if fs != nil {
			f.events = append(f.events, fmt.Sprintf("delete server %d", id))
		}
		f.mu.Unlock()
		if fs == nil {
			writeError(w, http.StatusNotFound, "not_found", "server not found")
			return
		}
		if err := f.fleet.Halt(fs.s.PublicNet.IPv4.IP); err != nil {
			f.t.Errorf("halt box of server %d: %v", id, err)
		}
		now := time.Now()
		writeJSON(w, http.StatusOK, schema.ServerDeleteResponse{Action: schema.Action{
			ID: id + 1_000_000, Status: "success", Command: "delete_server", Progress: 100, Started: now, Finished: &now,
		}})

	case opImageCreate:
		var req schema.ServerActionCreateImageRequest
		if !decode(w, r, &req) {
			return
		}
		f.createImage(w, id, req)
	case opRebuild:
		var req schema.ServerActionRebuildRequest
		if !decode(w, r, &req) {
			return
		}
		f.rebuild(w, id, req)
	case opImageList:
		sel, ok := parseSelector(w, r)
		if !ok {
			return
		}
		types := r.URL.Query()["type"]
		out := schema.ImageListResponse{Images: []schema.Image{}}
		for _, img := range f.imageList() {
			if sel.matches(img.Labels) && (len(types) == 0 || slices.Contains(types, img.Type)) {
				out.Images = append(out.Images, img)
			}
		}
		writeJSON(w, http.StatusOK, out)
	case opImageGet:
		f.mu.Lock()
		var img schema.Image
		p := f.images[id]
		if p != nil {
			img = *p
			img.Labels = maps.Clone(img.Labels)
		}
		f.mu.Unlock()
		if p == nil {
			writeError(w, http.StatusNotFound, "not_found", "image not found")
			return
		}
		writeJSON(w, http.StatusOK, schema.ImageGetResponse{Image: img})
	case opImageDelete:
		f.mu.Lock()
		p := f.images[id]
		delete(f.images, id)
		if p != nil {
			f.events = append(f.events, fmt.Sprintf("delete image %d", id))
		}
		f.mu.Unlock()
		if p == nil {
			writeError(w, http.StatusNotFound, "not_found", "image not found")
			return
		}
		if err := f.fleet.DeleteImage(imageName(id)); err != nil {
			f.t.Errorf("delete disk image of image %d: %v", id, err)
		}
		w.WriteHeader(http.StatusNoContent)
	case opActionList:
		out := schema.ActionListResponse{Actions: []schema.Action{}}
		var done []func()
		f.mu.Lock()
		for _, raw := range r.URL.Query()["id"] {
			aid, _ := strconv.ParseInt(raw, 10, 64)
			a := f.actions[aid]
			if a == nil {
				continue
			}
			if a.a.Status == "running" { // finished by the first look
				now := time.Now()
				a.a.Status, a.a.Progress, a.a.Finished = "success", 100, &now
				if a.done != nil {
					done = append(done, a.done)
				}
			}
			out.Actions = append(out.Actions, a.a)
		}
		f.mu.Unlock()
		for _, fn := range done {
			fn()
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// newAction records a running action of command, whose effect done (if
// not nil) makes when it finishes. It needs f.mu held.
func (f *fakeAPI) newActionLocked(command string, done func()) schema.Action {
	f.nextID++
	a := &fakeAction{a: schema.Action{ID: f.nextID, Status: "running", Command: command, Started: time.Now()}, done: done}
	f.actions[a.a.ID] = a
	return a.a
}

// createImage snapshots server id: its box's disk is copied at once, and
// the image is available when the action finishes.
func (f *fakeAPI) createImage(w http.ResponseWriter, id int64, req schema.ServerActionCreateImageRequest) {
	if req.Type == nil || (*req.Type != "snapshot" && *req.Type != "backup") {
		writeError(w, http.StatusBadRequest, "invalid_input", "type must be snapshot or backup")
		return
	}
	if *req.Type == "backup" {
		writeError(w, http.StatusUnprocessableEntity, "unsupported_error", "the fake makes snapshots only")
		return
	}
	var labels map[string]string
	if req.Labels != nil {
		labels = maps.Clone(*req.Labels)
		if msg := checkLabels(labels); msg != "" {
			writeError(w, http.StatusBadRequest, "invalid_input", msg)
			return
		}
	}
	f.mu.Lock()
	fs := f.servers[id]
	if fs == nil {
		f.mu.Unlock()
		writeError(w, http.StatusNotFound, "not_found", "server not found")
		return
	}
	f.nextID++
	imgID := f.nextID
	ip := fs.s.PublicNet.IPv4.IP
	f.mu.Unlock()
	if err := f.fleet.SaveImage(ip, imageName(imgID)); err != nil {
		writeError(w, http.StatusConflict, "conflict", "server has no disk to snapshot: "+err.Error())
		return
	}
	now := time.Now()
	size := float32(0.5)
	img := &schema.Image{
		ID: imgID, Status: "creating", Type: "snapshot", Labels: labels, Created: &now, ImageSize: &size, DiskSize: 40,
		Architecture: "x86", CreatedFrom: &schema.ImageCreatedFrom{ID: id, Name: fs.s.Name},
	}
	if req.Description != nil {
		img.Description = *req.Description
	}
	f.mu.Lock()
	f.images[imgID] = img
	f.events = append(f.events, fmt.Sprintf("create image %d", imgID))
	action := f.newActionLocked("create_image", func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if p := f.images[imgID]; p != nil {
			p.Status = "available"
		}
	})
	answer := *img
	answer.Labels = maps.Clone(labels)
	f.mu.Unlock()
	writeJSON(w, http.StatusCreated, schema.ServerActionCreateImageResponse{Action: action, Image: answer})
}

// rebuild rebuilds server id from an available snapshot: its box boots
// again, from a copy of the image, with the server's user data (or the
// request's, which then becomes the server's).
func (f *fakeAPI) rebuild(w http.ResponseWriter, id int64, req schema.ServerActionRebuildRequest) {
	f.mu.Lock()
	fs := f.servers[id]
	img := f.images[req.Image.ID]
	switch {
	case fs == nil:
		f.mu.Unlock()
		writeError(w, http.StatusNotFound, "not_found", "server not found")
		return
	case req.Image.ID == 0 || img == nil || img.Status != "available":
		f.mu.Unlock()
		writeError(w, http.StatusBadRequest, "invalid_input", "image is not an available snapshot of this project")
		return
	}
	if req.UserData != nil {
		fs.userData = *req.UserData
	}
	userData, ip := fs.userData, fs.s.PublicNet.IPv4.IP
	fs.s.Status = "rebuilding"
	f.events = append(f.events, fmt.Sprintf("rebuild server %d", id))
	action := f.newActionLocked("rebuild_server", func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if fs := f.servers[id]; fs != nil {
			fs.s.Status = "running"
		}
	})
	f.mu.Unlock()
	if err := f.fleet.BootImage(ip, userData, imageName(req.Image.ID)); err != nil {
		f.t.Errorf("boot server %d from image %d: %v", id, req.Image.ID, err)
	}
	writeJSON(w, http.StatusCreated, schema.ServerActionRebuildResponse{Action: action})
}

func (f *fakeAPI) createKey(w http.ResponseWriter, req schema.SSHKeyCreateRequest) {
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(req.PublicKey))
	if err != nil || req.Name == "" {
		writeError(w, http.StatusBadRequest, "invalid_input", "invalid name or public key")
		return
	}
	var labels map[string]string
	if req.Labels != nil {
		labels = *req.Labels
		if msg := checkLabels(labels); msg != "" {
			writeError(w, http.StatusBadRequest, "invalid_input", msg)
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fp := ssh.FingerprintLegacyMD5(pub)
	for _, k := range f.keys {
		if k.Name == req.Name || k.Fingerprint == fp {
			writeError(w, http.StatusConflict, "uniqueness_error", "SSH key with the same name or fingerprint already exists")
			return
		}
	}
	f.nextID++
	k := schema.SSHKey{ID: f.nextID, Name: req.Name, Fingerprint: fp, PublicKey: req.PublicKey, Labels: labels, Created: time.Now()}
	f.keys[k.ID] = k
	f.events = append(f.events, fmt.Sprintf("create key %d", k.ID))
	writeJSON(w, http.StatusCreated, schema.SSHKeyCreateResponse{SSHKey: k})
}

func (f *fakeAPI) createServer(w http.ResponseWriter, req schema.ServerCreateRequest) {
	typ, loc := req.ServerType.Name, req.Location
	if req.Name == "" || typ == "" || (req.Image.Name == "" && req.Image.ID == 0) || loc == "" || req.UserData == "" || req.Labels == nil {
		writeError(w, http.StatusBadRequest, "invalid_input", "name, server_type, image, location, user_data and labels are required here")
		return
	}
	if msg := checkLabels(*req.Labels); msg != "" {
		writeError(w, http.StatusBadRequest, "invalid_input", msg)
		return
	}
	if len(req.UserData) > 32*1024 {
		writeError(w, http.StatusBadRequest, "invalid_input", "user_data is longer than 32 KiB")
		return
	}
	f.mu.Lock()
	f.creates = append(f.creates, typ+"/"+loc)
	code := f.capacity[typ+"/"+loc]
	for _, id := range req.SSHKeys {
		if _, ok := f.keys[id]; !ok {
			code = "invalid_input"
		}
	}
	for _, s := range f.servers {
		if s.s.Name == req.Name {
			code = "uniqueness_error"
		}
	}
	if img := f.images[req.Image.ID]; req.Image.ID != 0 && (img == nil || img.Status != "available") {
		code = "invalid_input"
	}
	if code != "" {
		f.mu.Unlock()
		writeError(w, http.StatusPreconditionFailed, code, "cannot create "+typ+" in "+loc)
		return
	}
	f.nextID++
	id := f.nextID
	s := schema.Server{
		ID: id, Name: req.Name, Status: "initializing", Created: time.Now(), Labels: maps.Clone(*req.Labels),
		ServerType: schema.ServerType{Name: typ}, Location: schema.Location{Name: loc},
	}
	if req.Image.ID != 0 {
		s.Image = &schema.Image{ID: req.Image.ID, Type: "snapshot"}
	}
	ip := f.fleet.NewAddress()
	s.PublicNet.IPv4.IP = ip
	f.servers[id] = &fakeServer{s: s, userData: req.UserData}
	f.events = append(f.events, fmt.Sprintf("create server %d", id))
	noBoot, block := f.noBoot, slices.Clone(f.block)
	f.mu.Unlock()
	for _, p := range block {
		f.fleet.Block(ip, p)
	}
	if !noBoot {
		boot := f.fleet.Boot
		if req.Image.ID != 0 {
			boot = func(ip, userData string) error { return f.fleet.BootImage(ip, userData, imageName(req.Image.ID)) }
		}
		if err := boot(ip, req.UserData); err != nil {
			f.t.Errorf("boot server %d from its user data: %v", id, err)
		}
	}
	answer := s
	answer.PublicNet.IPv4.IP = "" // no address until it runs
	now := time.Now()
	writeJSON(w, http.StatusCreated, schema.ServerCreateResponse{
		Server: answer, Action: schema.Action{ID: id + 1_000_000, Status: "running", Command: "create_server", Started: now},
	})
}

// selector is a parsed Hetzner label selector of equality terms.
type selector map[string]string

func parseSelector(w http.ResponseWriter, r *http.Request) (selector, bool) {
	sel := selector{}
	raw := r.URL.Query().Get("label_selector")
	if raw == "" {
		return sel, true
	}
	for _, term := range strings.Split(raw, ",") {
		k, v, ok := strings.Cut(term, "==")
		if !ok {
			k, v, ok = strings.Cut(term, "=")
		}
		if !ok && labelKeyRE.MatchString(term) { // the key exists
			k, v, ok = term, existsValue, true
		}
		if !ok || k == "" {
			writeError(w, http.StatusBadRequest, "invalid_input", "label selector term "+term+" is not supported by the fake")
			return nil, false
		}
		sel[k] = v
	}
	return sel, true
}

// existsValue stands in a selector for "the key exists, any value".
const existsValue = "\x00exists"

func (s selector) matches(labels map[string]string) bool {
	for k, v := range s {
		if got, ok := labels[k]; !ok || (got != v && v != existsValue) {
			return false
		}
	}
	return true
}

var (
	labelKeyRE   = regexp.MustCompile(`^([a-z0-9A-Z]([a-z0-9A-Z._-]{0,61}[a-z0-9A-Z])?)$`)
	labelValueRE = regexp.MustCompile(`^(([a-z0-9A-Z]([a-z0-9A-Z._-]{0,61}[a-z0-9A-Z])?)?)$`)
)

// checkLabels applies Hetzner's label rules.
func checkLabels(labels map[string]string) string {
	for k, v := range labels {
		if !labelKeyRE.MatchString(k) {
			return "invalid label key " + k
		}
		if !labelValueRE.MatchString(v) {
			return "invalid label value " + k + "=" + v
		}
	}
	return ""
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "json_error", err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, schema.ErrorResponse{Error: schema.Error{Code: code, Message: msg}})
}

// serveCatalog answers lookups by name of Hetzner's server types, images
// and locations.
func serveCatalog(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("name")
	switch r.URL.Path {
	case "/server_types":
		out := schema.ServerTypeListResponse{ServerTypes: []schema.ServerType{}}
		arch := map[string]string{"cx23": "x86", "cpx22": "x86", "cx33": "x86", "cax11": "arm"}
		if a, ok := arch[name]; ok {
			out.ServerTypes = append(out.ServerTypes, schema.ServerType{ID: 1, Name: name, Cores: 2, Memory: 4, Architecture: a})
		}
		writeJSON(w, http.StatusOK, out)
	case "/images":
		out := schema.ImageListResponse{Images: []schema.Image{}}
		if name == "debian-12" || name == "ubuntu-24.04" {
			n := name
			out.Images = append(out.Images, schema.Image{ID: 2, Name: &n, Type: "system", Status: "available", Architecture: q.Get("architecture")})
		}
		writeJSON(w, http.StatusOK, out)
	case "/locations":
		out := schema.LocationListResponse{Locations: []schema.Location{}}
		city := map[string]string{"fsn1": "Falkenstein", "nbg1": "Nuremberg", "hel1": "Helsinki"}
		if c, ok := city[name]; ok {
			out.Locations = append(out.Locations, schema.Location{ID: 3, Name: name, City: c})
		}
		writeJSON(w, http.StatusOK, out)
	}
}
