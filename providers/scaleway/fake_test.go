package scaleway_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
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

	opSnapCreate  = "snapshot.create"
	opSnapList    = "snapshot.list"
	opSnapGet     = "snapshot.get"
	opSnapDelete  = "snapshot.delete"
	opImageCreate = "image.create"
	opImageList   = "image.list"
	opImageGet    = "image.get"
	opImageDelete = "image.delete"
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
// actions, local volumes, snapshots, images and typed errors, with each
// server's box served by a cloudtest fleet (with disks) from its user data
// once it is powered on. A snapshot is a copy of the box's disk; a server
// created from an image of it starts with a copy.
type fakeAPI struct {
	t     testing.TB
	fleet *cloudtest.Fleet
	URL   string

	mu       sync.Mutex
	nextID   int
	servers  map[string]*fakeServer
	volumes  map[string]bool
	snaps    map[string]*instance.Snapshot
	images   map[string]*instance.Image
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
	// fromImage is the fleet image (of a snapshot) its disk starts as.
	fromImage string
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

// addImage puts an available image into the fake directly (one made by
// someone else), with tags and no snapshot, and returns its ID.
func (f *fakeAPI) addImage(tags []string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.newIDLocked()
	now := time.Now()
	f.images[id] = &instance.Image{ID: id, Name: "theirs", Arch: instance.ArchX86_64, CreationDate: &now, Project: testProject,
		State: instance.ImageStateAvailable, Tags: tags, Zone: scw.ZoneFrPar1}
	return id
}

// snapImage is the fleet's name of the disk image of snapshot id.
func snapImage(id string) string { return "scw-snapshot-" + id }

// imageList returns copies of the images, by ID.
func (f *fakeAPI) imageList() []instance.Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []instance.Image
	for _, id := range slices.Sorted(maps.Keys(f.images)) {
		img := *f.images[id]
		img.Tags = slices.Clone(img.Tags)
		out = append(out, img)
	}
	return out
}

// snapshotList returns copies of the snapshots, by ID.
func (f *fakeAPI) snapshotList() []instance.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []instance.Snapshot
	for _, id := range slices.Sorted(maps.Keys(f.snaps)) {
		s := *f.snaps[id]
		s.Tags = slices.Clone(s.Tags)
		out = append(out, s)
	}
	return out
}

// hasTags reports whether tags has every tag of the comma-separated
// filter ("" for none).
func hasTags(tags []string, filter string) bool {
	return filter == "" || !slices.ContainsFunc(strings.Split(filter, ","), func(t string) bool { return !slices.Contains(tags, t) })
}

// newFakeAPIOf is newFakeAPI with the servers' boxes served by fleet.
func newFakeAPIOf(t testing.TB, fleet *cloudtest.Fleet) *fakeAPI {
	f := &fakeAPI{
		t: t, fleet: fleet, servers: map[string]*fakeServer{}, volumes: map[string]bool{},
		snaps: map[string]*instance.Snapshot{}, images: map[string]*instance.Image{},
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
	snapPath   = regexp.MustCompile(`^/snapshots/([0-9a-f-]+)$`)
	imagePath  = regexp.MustCompile(`^/images/([0-9a-f-]+)$`)
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
	if m := snapPath.FindStringSubmatch(p); m != nil {
		switch r.Method {
		case http.MethodGet:
			return opSnapGet, zone, m[1]
		case http.MethodDelete:
			return opSnapDelete, zone, m[1]
		}
	}
	if m := imagePath.FindStringSubmatch(p); m != nil {
		switch r.Method {
		case http.MethodGet:
			return opImageGet, zone, m[1]
		case http.MethodDelete:
			return opImageDelete, zone, m[1]
		}
	}
	switch {
	case p == "/servers" && r.Method == http.MethodPost:
		return opCreate, zone, ""
	case p == "/servers" && r.Method == http.MethodGet:
		return opList, zone, ""
	case p == "/products/servers" && r.Method == http.MethodGet:
		return opCatalog, zone, ""
	case p == "/snapshots" && r.Method == http.MethodPost:
		return opSnapCreate, zone, ""
	case p == "/snapshots" && r.Method == http.MethodGet:
		return opSnapList, zone, ""
	case p == "/images" && r.Method == http.MethodPost:
		return opImageCreate, zone, ""
	case p == "/images" && r.Method == http.MethodGet:
		return opImageList, zone, ""
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
	case opSnapCreate:
		var req instance.CreateSnapshotRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		f.createSnapshot(w, zone, req)
	case opImageCreate:
		var req instance.CreateImageRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
			return
		}
		f.createImage(w, zone, req)
	case opSnapList:
		q := r.URL.Query()
		out := instance.ListSnapshotsResponse{Snapshots: []*instance.Snapshot{}}
		for _, sn := range f.snapshotList() {
			if string(sn.Zone) == zone && hasTags(sn.Tags, q.Get("tags")) && (q.Get("project") == "" || q.Get("project") == sn.Project) {
				out.Snapshots = append(out.Snapshots, &sn)
			}
		}
		out.TotalCount = uint32(len(out.Snapshots))
		writeJSON(w, http.StatusOK, out)
	case opImageList:
		q := r.URL.Query()
		out := instance.ListImagesResponse{Images: []*instance.Image{}}
		for _, img := range f.imageList() {
			if string(img.Zone) == zone && hasTags(img.Tags, q.Get("tags")) && (q.Get("project") == "" || q.Get("project") == img.Project) &&
				(q.Get("public") == "" || q.Get("public") == fmt.Sprint(img.Public)) {
				out.Images = append(out.Images, &img)
			}
		}
		out.TotalCount = uint32(len(out.Images))
		writeJSON(w, http.StatusOK, out)
	case opSnapGet:
		f.mu.Lock()
		sn := f.snaps[id]
		var out instance.Snapshot
		if sn != nil {
			if sn.State == instance.SnapshotStateSnapshotting { // done by the first look
				sn.State = instance.SnapshotStateAvailable
			}
			out = *sn
			out.Tags = slices.Clone(sn.Tags)
		}
		f.mu.Unlock()
		if sn == nil || string(sn.Zone) != zone {
			notFoundOf(w, "instance_snapshot", id)
			return
		}
		writeJSON(w, http.StatusOK, instance.GetSnapshotResponse{Snapshot: &out})
	case opImageGet:
		f.mu.Lock()
		img := f.images[id]
		var out instance.Image
		if img != nil {
			if img.State == instance.ImageStateCreating { // done by the first look
				img.State = instance.ImageStateAvailable
			}
			out = *img
			out.Tags = slices.Clone(img.Tags)
		}
		f.mu.Unlock()
		if img == nil || string(img.Zone) != zone {
			notFoundOf(w, "instance_image", id)
			return
		}
		writeJSON(w, http.StatusOK, instance.GetImageResponse{Image: &out})
	case opImageDelete:
		f.mu.Lock()
		img := f.images[id]
		if img != nil {
			delete(f.images, id)
			f.events = append(f.events, "delete image "+id)
		}
		f.mu.Unlock()
		if img == nil {
			notFoundOf(w, "instance_image", id)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case opSnapDelete:
		f.mu.Lock()
		sn := f.snaps[id]
		used := false
		for _, img := range f.images {
			used = used || img.RootVolume != nil && img.RootVolume.ID == id
		}
		if sn != nil && !used {
			delete(f.snaps, id)
			f.events = append(f.events, "delete snapshot "+id)
		}
		f.mu.Unlock()
		switch {
		case sn == nil:
			notFoundOf(w, "instance_snapshot", id)
		case used:
			writeError(w, http.StatusBadRequest, "invalid_request_error", "snapshot is used by an image")
		default:
			if err := f.fleet.DeleteImage(snapImage(id)); err != nil {
				f.t.Errorf("delete the disk image of snapshot %s: %v", id, err)
			}
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
	case *req.Project != testProject:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "unknown project")
		return
	case vol == nil || vol.VolumeType != instance.VolumeVolumeTypeLSSD || vol.Size == nil:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "want one local root volume with a size")
		return
	}
	f.mu.Lock()
	from := ""
	if *req.Image != imageID {
		img := f.images[*req.Image]
		if img == nil || string(img.Zone) != zone || img.State != instance.ImageStateAvailable {
			f.mu.Unlock()
			writeError(w, http.StatusBadRequest, "invalid_request_error", "unknown image")
			return
		}
		from = snapImage(img.RootVolume.ID)
	}
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
		Tags: slices.Clone(req.Tags), Project: testProject, DynamicIPRequired: true, Arch: instance.ArchX86_64,
		Volumes: map[string]*instance.VolumeServer{"0": {ID: volID, Size: vol.Size, VolumeType: instance.VolumeServerVolumeTypeLSSD, Boot: true, Zone: scw.Zone(zone)}},
	}
	f.servers[id] = &fakeServer{s: s, ip: f.fleet.NewAddress(), fromImage: from}
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
	var ip, ud, from string
	ok := fs != nil && fs.s.State == instance.ServerStateStopped
	if ok {
		fs.s.State = instance.ServerStateStarting
		ip, ud, from = fs.ip, fs.userData, fs.fromImage
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
		boot := f.fleet.Boot
		if from != "" {
			boot = func(ip, ud string) error { return f.fleet.BootImage(ip, ud, from) }
		}
		if err := boot(ip, ud); err != nil {
			f.t.Errorf("boot server %s from its user data: %v", id, err)
		}
	}
	writeJSON(w, http.StatusAccepted, instance.ServerActionResponse{Task: &instance.Task{ID: id, Description: "server_poweron", Status: "pending", StartedAt: scw.TimePtr(time.Now())}})
}

func notFound(w http.ResponseWriter, id string) { notFoundOf(w, "instance_server", id) }

func notFoundOf(w http.ResponseWriter, resource, id string) {
	writeJSON(w, http.StatusNotFound, map[string]any{"type": "not_found", "resource": resource, "resource_id": id, "message": "resource is not found"})
}

// createSnapshot snapshots a server's local root volume: its box's disk
// is copied now, and the snapshot is available from the first look.
func (f *fakeAPI) createSnapshot(w http.ResponseWriter, zone string, req instance.CreateSnapshotRequest) {
	if req.VolumeID == nil || req.Name == "" || req.Project == nil || req.VolumeType != instance.SnapshotVolumeTypeLSSD {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "volume_id, name, project and volume_type l_ssd are required here")
		return
	}
	f.mu.Lock()
	var src *fakeServer
	for _, fs := range f.servers {
		if v := fs.s.Volumes["0"]; v != nil && v.ID == *req.VolumeID && string(fs.s.Zone) == zone {
			src = fs
		}
	}
	if src == nil {
		f.mu.Unlock()
		writeJSON(w, http.StatusNotFound, map[string]any{"type": "not_found", "resource": "instance_volume", "resource_id": *req.VolumeID, "message": "resource is not found"})
		return
	}
	id := f.newIDLocked()
	ip, vol := src.ip, src.s.Volumes["0"]
	f.mu.Unlock()
	name := ""
	if vol.Name != nil {
		name = *vol.Name
	}
	if err := f.fleet.SaveImage(ip, snapImage(id)); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "the volume has no disk to snapshot: "+err.Error())
		return
	}
	now := time.Now()
	var tags []string
	if req.Tags != nil {
		tags = slices.Clone(*req.Tags)
	}
	sn := &instance.Snapshot{
		ID: id, Name: req.Name, Project: *req.Project, Organization: *req.Project, Tags: tags, VolumeType: instance.VolumeVolumeTypeLSSD,
		Size: *vol.Size, State: instance.SnapshotStateSnapshotting, BaseVolume: &instance.SnapshotBaseVolume{ID: vol.ID, Name: name},
		CreationDate: &now, ModificationDate: &now, Zone: scw.Zone(zone),
	}
	f.mu.Lock()
	f.snaps[id] = sn
	f.events = append(f.events, "create snapshot "+id)
	out := *sn
	out.Tags = slices.Clone(tags)
	f.mu.Unlock()
	writeJSON(w, http.StatusCreated, instance.CreateSnapshotResponse{Snapshot: &out, Task: &instance.Task{ID: id, Description: "volume_snapshot", Status: "pending", StartedAt: &now}})
}

// createImage makes an image of an available snapshot; it is available
// from the first look.
func (f *fakeAPI) createImage(w http.ResponseWriter, zone string, req instance.CreateImageRequest) {
	if req.Name == "" || req.RootVolume == "" || req.Arch == "" || req.Project == nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "name, root_volume, arch and project are required here")
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	sn := f.snaps[req.RootVolume]
	if sn == nil || string(sn.Zone) != zone || sn.State != instance.SnapshotStateAvailable {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "root_volume is not an available snapshot of the zone")
		return
	}
	id := f.newIDLocked()
	now := time.Now()
	img := &instance.Image{
		ID: id, Name: req.Name, Arch: req.Arch, CreationDate: &now, ModificationDate: &now, Project: *req.Project, Organization: *req.Project,
		RootVolume: &instance.VolumeSummary{ID: sn.ID, Name: sn.Name, Size: sn.Size, VolumeType: instance.VolumeVolumeTypeLSSD},
		State:      instance.ImageStateCreating, Tags: slices.Clone(req.Tags), Zone: scw.Zone(zone), ExtraVolumes: map[string]*instance.Volume{},
	}
	f.images[id] = img
	f.events = append(f.events, "create image "+id)
	out := *img
	out.Tags = slices.Clone(img.Tags)
	writeJSON(w, http.StatusCreated, instance.CreateImageResponse{Image: &out})
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
