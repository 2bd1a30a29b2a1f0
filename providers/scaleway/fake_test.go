package scaleway_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scaleway/scaleway-sdk-go/api/instance/v1"
	"github.com/scaleway/scaleway-sdk-go/api/marketplace/v2"
	"github.com/scaleway/scaleway-sdk-go/scw"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

const (
	testAccessKey = "SCWTESTACCESS0KEY012"
	testSecretKey = "0b0e2f6c-5d7a-4c1e-9a3b-7f6e5d4c3b2a"
	testProject   = "6f1d3c2b-8a9e-4f7d-b6c5-a4b3c2d1e0f9"
	imageID       = "9c41e95b-add2-4ef8-994b-4d5b2e2b5c62"
)

// Operations of the fake API, for faults and the request log.
const (
	opCreate   = "server.create"
	opList     = "server.list"
	opGet      = "server.get"
	opUpdate   = "server.update"
	opDelete   = "server.delete"
	opUserData = "server.user_data"
	opPoweron  = "server.poweron"
	opTerm     = "server.terminate"
	opVolume   = "volume.delete"
	opCatalog  = "catalog" // Instance types, marketplace images
)

// fault makes one operation of the fake fail or hang.
type fault struct {
	status  int    // HTTP status; 500 when zero
	errType string // Scaleway error type; none when empty
	hang    bool   // block until the client gives up
	after   bool   // do the operation first, then fail or hang (the answer is lost)
	onHang  func() // called when a hang starts
	times   int    // 0: every time
	fired   int
}

// fakeAPI is a fake Scaleway instance API (and the marketplace's image
// lookup): servers with tags in zones, tag filters, user data, power
// actions, local volumes and typed errors, with each server's box served
// by a cloudtest fleet from its user data once it is powered on.
type fakeAPI struct {
	t     testing.TB
	fleet *cloudtest.Fleet
	URL   string

	mu       sync.Mutex
	nextID   int
	servers  map[string]*fakeServer
	volumes  map[string]bool
	order    []string          // server IDs in creation order
	events   []string          // mutations, in order
	creates  []string          // "type/zone" of every create attempt
	faults   map[string]*fault // by operation
	capacity map[string]string // "type/zone" -> error type
	noBoot   bool              // servers never serve SSH
	block    []int             // SSH ports of new boxes that refuse connections
	dead     bool              // every request fails (the process was killed)
	onGet    func(s *instance.Server)
}

type fakeServer struct {
	s        instance.Server
	userData string
	ip       string
}

func newFakeAPI(t testing.TB) *fakeAPI { return newFakeAPIOf(t, cloudtest.NewFleet(t)) }

// newFakeAPIOf is newFakeAPI with the servers' boxes served by fleet.
func newFakeAPIOf(t testing.TB, fleet *cloudtest.Fleet) *fakeAPI {
	f := &fakeAPI{
		t: t, fleet: fleet, servers: map[string]*fakeServer{}, volumes: map[string]bool{},
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

// serverList returns copies of the servers, oldest first.
func (f *fakeAPI) serverList() []instance.Server {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []instance.Server
	for _, id := range f.order {
		if fs := f.servers[id]; fs != nil {
			out = append(out, copyServer(fs.s))
		}
	}
	return out
}

func (f *fakeAPI) volumeCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.volumes)
}

func copyServer(s instance.Server) instance.Server {
	s.Tags = slices.Clone(s.Tags)
	return s
}

func (f *fakeAPI) userData(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[id].userData
}

// codec reads and writes tags as the provider does.
var codec = cloud.TagCodec{MaxLen: 64}

// mustTags writes labels as tags.
func mustTags(labels map[string]string) []string {
	tags, err := codec.Tags(labels)
	if err != nil {
		panic(err)
	}
	return tags
}

// labelsOf reads a server's tags as labels.
func labelsOf(s instance.Server) map[string]string { return codec.Labels(s.Tags) }

// addServer puts a running server into the fake directly (one made by
// someone else), without a box.
func (f *fakeAPI) addServer(name string, labels map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.newIDLocked()
	ip := f.fleet.NewAddress()
	s := instance.Server{ID: id, Name: name, State: instance.ServerStateRunning, Zone: scw.ZoneFrPar1, Tags: mustTags(labels), Project: testProject}
	s.PublicIPs = []*instance.ServerIP{{ID: id, Address: net.ParseIP(ip), Family: instance.ServerIPIPFamilyInet, Dynamic: true}}
	f.servers[id] = &fakeServer{s: s, ip: ip}
	f.order = append(f.order, id)
	return id
}

func (f *fakeAPI) newIDLocked() string {
	f.nextID++
	return fmt.Sprintf("5e7d1c2a-0000-4000-8000-%012d", f.nextID)
}

var (
	zonePath   = regexp.MustCompile(`^/instance/v1/zones/([a-z]{2}-[a-z]{3}-[0-9])(/.*)$`)
	serverPath = regexp.MustCompile(`^/servers/([0-9a-f-]+)(/action|/user_data/cloud-init)?$`)
	volumePath = regexp.MustCompile(`^/volumes/([0-9a-f-]+)$`)
)

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("X-Auth-Token") != testSecretKey {
		writeJSON(w, http.StatusUnauthorized, map[string]any{
			"type": "denied_authentication", "method": "api_key", "reason": "invalid_argument", "message": "authentication is denied",
		})
		return
	}
	// Reading the whole body lets the server notice a client that gives
	// up (it watches the connection only once the body is consumed).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	op, zone, id := route(r, body)
	if op == "" {
		writeError(w, http.StatusNotFound, "", "no route "+r.Method+" "+r.URL.Path)
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
		writeError(w, http.StatusServiceUnavailable, "", "the process that made this request is dead")
		return
	}
	if ft == nil {
		f.serve(w, r, body, op, zone, id)
		return
	}
	if ft.after {
		f.serve(httptest.NewRecorder(), r, body, op, zone, id) // done, but the answer is lost
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
	writeError(w, status, ft.errType, "injected failure of "+op)
}

func route(r *http.Request, body []byte) (op, zone, id string) {
	if r.URL.Path == "/marketplace/v2/local-images" && r.Method == http.MethodGet {
		return opCatalog, "", ""
	}
	m := zonePath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		return "", "", ""
	}
	zone, p := m[1], m[2]
	if m := serverPath.FindStringSubmatch(p); m != nil {
		id = m[1]
		switch {
		case m[2] == "/action" && r.Method == http.MethodPost:
			var req struct{ Action string }
			_ = json.Unmarshal(body, &req)
			switch req.Action {
			case "poweron":
				return opPoweron, zone, id
			case "terminate":
				return opTerm, zone, id
			}
		case m[2] == "/user_data/cloud-init" && r.Method == http.MethodPatch:
			return opUserData, zone, id
		case m[2] == "" && r.Method == http.MethodGet:
			return opGet, zone, id
		case m[2] == "" && r.Method == http.MethodPatch:
			return opUpdate, zone, id
		case m[2] == "" && r.Method == http.MethodDelete:
			return opDelete, zone, id
		}
		return "", "", ""
	}
	if m := volumePath.FindStringSubmatch(p); m != nil && r.Method == http.MethodDelete {
		return opVolume, zone, m[1]
	}
	switch {
	case p == "/servers" && r.Method == http.MethodPost:
		return opCreate, zone, ""
	case p == "/servers" && r.Method == http.MethodGet:
		return opList, zone, ""
	case p == "/products/servers" && r.Method == http.MethodGet:
		return opCatalog, zone, ""
	}
	return "", "", ""
}

// types are the fake's Instance types.
var types = map[string]*instance.ServerType{
	"DEV1-M": {Ncpus: 3, RAM: 4 * uint64(scw.GB)},
	"GP1-XS": {Ncpus: 4, RAM: 16 * uint64(scw.GB)},
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request, body []byte, op, zone, id string) {
	switch op {
	case opCatalog:
		if strings.HasPrefix(r.URL.Path, "/marketplace/") {
			out := marketplace.ListLocalImagesResponse{LocalImages: []*marketplace.LocalImage{}}
			if r.URL.Query().Get("image_label") == "debian_bookworm" {
				out.LocalImages = append(out.LocalImages, &marketplace.LocalImage{
					ID: imageID, Label: "debian_bookworm", Zone: scw.Zone(r.URL.Query().Get("zone")),
					CompatibleCommercialTypes: []string{"DEV1-M", "GP1-XS"}, Type: marketplace.LocalImageTypeInstanceLocal,
				})
			}
			out.TotalCount = uint32(len(out.LocalImages))
			writeJSON(w, http.StatusOK, out)
			return
		}
		writeJSON(w, http.StatusOK, instance.ListServersTypesResponse{Servers: types, TotalCount: uint32(len(types))})
	case opCreate:
		var req instance.CreateServerRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		f.create(w, zone, req)
	case opList:
		want := r.URL.Query().Get("tags")
		out := instance.ListServersResponse{Servers: []*instance.Server{}}
		for _, s := range f.serverList() {
			if string(s.Zone) != zone {
				continue
			}
			if want == "" || !slices.ContainsFunc(strings.Split(want, ","), func(t string) bool { return !slices.Contains(s.Tags, t) }) {
				out.Servers = append(out.Servers, &s)
			}
		}
		out.TotalCount = uint32(len(out.Servers))
		writeJSON(w, http.StatusOK, out)
	case opGet:
		f.mu.Lock()
		fs := f.servers[id]
		var s instance.Server
		if fs != nil {
			if fs.s.State == instance.ServerStateStarting { // booted by the first look
				fs.s.State = instance.ServerStateRunning
				fs.s.PublicIPs = []*instance.ServerIP{{ID: id, Address: net.ParseIP(fs.ip), Family: instance.ServerIPIPFamilyInet, Dynamic: true}}
			}
			if f.onGet != nil {
				f.onGet(&fs.s)
			}
			s = copyServer(fs.s)
		}
		f.mu.Unlock()
		if fs == nil {
			notFound(w, id)
			return
		}
		writeJSON(w, http.StatusOK, instance.GetServerResponse{Server: &s})
	case opUpdate:
		var req instance.UpdateServerRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		f.mu.Lock()
		fs := f.servers[id]
		var s instance.Server
		if fs != nil {
			if req.Tags != nil {
				fs.s.Tags = slices.Clone(*req.Tags)
				f.events = append(f.events, "tag server "+id+" state="+labelsOf(fs.s)["state"])
			}
			s = copyServer(fs.s)
		}
		f.mu.Unlock()
		if fs == nil {
			notFound(w, id)
			return
		}
		writeJSON(w, http.StatusOK, instance.UpdateServerResponse{Server: &s})
	case opUserData:
		f.mu.Lock()
		fs := f.servers[id]
		if fs != nil {
			fs.userData = string(body)
		}
		f.mu.Unlock()
		if fs == nil {
			notFound(w, id)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case opPoweron:
		f.poweron(w, id)
	case opTerm:
		f.mu.Lock()
		fs := f.servers[id]
		if fs != nil {
			delete(f.servers, id)
			for _, v := range fs.s.Volumes {
				delete(f.volumes, v.ID)
			}
			f.events = append(f.events, "terminate server "+id)
		}
		f.mu.Unlock()
		if fs == nil {
			notFound(w, id)
			return
		}
		if err := f.fleet.Halt(fs.ip); err != nil {
			f.t.Errorf("halt box of server %s: %v", id, err)
		}
		writeJSON(w, http.StatusAccepted, instance.ServerActionResponse{Task: &instance.Task{ID: id, Description: "server_terminate", Status: "pending"}})
	case opDelete:
		f.mu.Lock()
		fs := f.servers[id]
		stopped := fs != nil && fs.s.State == instance.ServerStateStopped
		if stopped {
			delete(f.servers, id)
			f.events = append(f.events, "delete server "+id)
		}
		f.mu.Unlock()
		switch {
		case fs == nil:
			notFound(w, id)
		case !stopped:
			writeError(w, http.StatusBadRequest, "invalid_request_error", "instance must be stopped to be deleted")
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	case opVolume:
		f.mu.Lock()
		ok := f.volumes[id]
		delete(f.volumes, id)
		if ok {
			f.events = append(f.events, "delete volume "+id)
		}
		f.mu.Unlock()
		if !ok {
			notFound(w, id)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (f *fakeAPI) create(w http.ResponseWriter, zone string, req instance.CreateServerRequest) {
	vol := req.Volumes["0"]
	switch {
	case req.Name == "" || req.CommercialType == "" || req.Image == nil || req.Project == nil || len(req.Tags) == 0:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "name, commercial_type, image, project and tags are required here")
		return
	case *req.Image != imageID || *req.Project != testProject:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "unknown image or project")
		return
	case vol == nil || vol.VolumeType != instance.VolumeVolumeTypeLSSD || vol.Size == nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "want one local root volume with a size")
		return
	}
	f.mu.Lock()
	f.creates = append(f.creates, req.CommercialType+"/"+zone)
	errType := f.capacity[req.CommercialType+"/"+zone]
	if types[req.CommercialType] == nil {
		errType = "invalid_arguments"
	}
	if errType != "" {
		f.mu.Unlock()
		status := map[string]int{"out_of_stock": http.StatusPreconditionFailed, "quotas_exceeded": http.StatusForbidden}[errType]
		writeError(w, cmp.Or(status, http.StatusBadRequest), errType, "cannot create "+req.CommercialType+" in "+zone)
		return
	}
	id := f.newIDLocked()
	volID := f.newIDLocked()
	s := instance.Server{
		ID: id, Name: req.Name, State: instance.ServerStateStopped, Zone: scw.Zone(zone), CommercialType: req.CommercialType,
		Tags: slices.Clone(req.Tags), Project: testProject, DynamicIPRequired: true,
		Volumes: map[string]*instance.VolumeServer{"0": {ID: volID, Size: vol.Size, VolumeType: instance.VolumeServerVolumeTypeLSSD, Boot: true, Zone: scw.Zone(zone)}},
	}
	f.servers[id] = &fakeServer{s: s, ip: f.fleet.NewAddress()}
	f.volumes[volID] = true
	f.order = append(f.order, id)
	f.events = append(f.events, "create server "+id)
	f.mu.Unlock()
	writeJSON(w, http.StatusCreated, instance.CreateServerResponse{Server: &s})
}

// poweron starts a stopped server: its box boots from the user data set
// before.
func (f *fakeAPI) poweron(w http.ResponseWriter, id string) {
	f.mu.Lock()
	fs := f.servers[id]
	var ip, ud string
	ok := fs != nil && fs.s.State == instance.ServerStateStopped
	if ok {
		fs.s.State = instance.ServerStateStarting
		ip, ud = fs.ip, fs.userData
		f.events = append(f.events, "poweron server "+id)
	}
	noBoot, block := f.noBoot, slices.Clone(f.block)
	f.mu.Unlock()
	switch {
	case fs == nil:
		notFound(w, id)
		return
	case !ok:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "server should be stopped")
		return
	}
	for _, p := range block {
		f.fleet.Block(ip, p)
	}
	if !noBoot {
		if err := f.fleet.Boot(ip, ud); err != nil {
			f.t.Errorf("boot server %s from its user data: %v", id, err)
		}
	}
	writeJSON(w, http.StatusAccepted, instance.ServerActionResponse{Task: &instance.Task{ID: id, Description: "server_poweron", Status: "pending", StartedAt: scw.TimePtr(time.Now())}})
}

func notFound(w http.ResponseWriter, id string) {
	writeJSON(w, http.StatusNotFound, map[string]any{"type": "not_found", "resource": "instance_server", "resource_id": id, "message": "resource is not found"})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers as the instance API does: a message, and a type
// when the error has one.
func writeError(w http.ResponseWriter, status int, errType, msg string) {
	body := map[string]any{"message": msg}
	if errType != "" {
		body["type"] = errType
	}
	if errType == "invalid_arguments" {
		body["details"] = []map[string]string{{"argument_name": "commercial_type", "reason": "constraint", "help_message": msg}}
	}
	writeJSON(w, status, body)
}

var ids = regexp.MustCompile(` [0-9a-f]{8}-[0-9a-f-]+`)

// events normalises the fake's mutation log: IDs dropped.
func events(api *fakeAPI) []string {
	var out []string
	for _, e := range api.log() {
		out = append(out, ids.ReplaceAllString(e, ""))
	}
	return out
}
