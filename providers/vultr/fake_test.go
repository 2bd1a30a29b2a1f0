package vultr_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vultr/govultr/v3"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

const testKey = "test-api-key-0123456789"

// Operations of the fake API, for faults and the request log.
const (
	opCreate  = "instance.create"
	opList    = "instance.list"
	opGet     = "instance.get"
	opUpdate  = "instance.update"
	opDelete  = "instance.delete"
	opAvail   = "region.availability"
	opCatalog = "catalog" // account, operating systems
)

// fault makes one operation of the fake fail or hang.
type fault struct {
	status int    // HTTP status; 500 when zero
	hang   bool   // block until the client gives up
	after  bool   // do the operation first, then fail or hang (the answer is lost)
	onHang func() // called when a hang starts
	times  int    // 0: every time
	fired  int
}

// fakeAPI is a fake Vultr API v2: instances with tags, tag filters,
// cursor pagination, region availability and errors, with each instance's
// box served by a cloudtest fleet from its user data.
type fakeAPI struct {
	t     testing.TB
	fleet *cloudtest.Fleet
	URL   string

	mu        sync.Mutex
	nextID    int
	instances map[string]*fakeInstance
	order     []string          // instance IDs in creation order
	events    []string          // mutations, in order
	creates   []string          // "plan/region" of every create
	faults    map[string]*fault // by operation
	soldOut   map[string]bool   // "plan/region" the availability list leaves out
	noBoot    bool              // instances never serve SSH
	block     []int             // SSH ports of new boxes that refuse connections
	dead      bool              // every request fails (the process was killed)
	onGet     func(inst *govultr.Instance)
}

type fakeInstance struct {
	inst     govultr.Instance
	userData string
	ip       string
}

func newFakeAPI(t testing.TB) *fakeAPI { return newFakeAPIOf(t, cloudtest.NewFleet(t)) }

// newFakeAPIOf is newFakeAPI with the instances' boxes served by fleet.
func newFakeAPIOf(t testing.TB, fleet *cloudtest.Fleet) *fakeAPI {
	f := &fakeAPI{
		t: t, fleet: fleet, instances: map[string]*fakeInstance{},
		faults: map[string]*fault{}, soldOut: map[string]bool{},
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

// instanceList returns copies of the instances, oldest first.
func (f *fakeAPI) instanceList() []govultr.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []govultr.Instance
	for _, id := range f.order {
		if fi := f.instances[id]; fi != nil {
			out = append(out, copyInstance(fi.inst))
		}
	}
	return out
}

func copyInstance(inst govultr.Instance) govultr.Instance {
	inst.Tags = slices.Clone(inst.Tags)
	return inst
}

func (f *fakeAPI) userData(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.instances[id].userData
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

// labelsOf reads an instance's tags as labels.
func labelsOf(inst govultr.Instance) map[string]string { return codec.Labels(inst.Tags) }

// addInstance puts an instance into the fake directly (one made by
// someone else), running and without a box.
func (f *fakeAPI) addInstance(name string, labels map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.newIDLocked()
	ip := f.fleet.NewAddress()
	f.instances[id] = &fakeInstance{ip: ip, inst: govultr.Instance{
		ID: id, Label: name, Status: "active", PowerStatus: "running", MainIP: ip, Tags: mustTags(labels),
	}}
	f.order = append(f.order, id)
	return id
}

func (f *fakeAPI) newIDLocked() string {
	f.nextID++
	return fmt.Sprintf("cb7e1b2a-0000-4000-8000-%012d", f.nextID)
}

var (
	instancePath = regexp.MustCompile(`^/v2/instances/([0-9a-f-]+)$`)
	availPath    = regexp.MustCompile(`^/v2/regions/([a-z0-9-]+)/availability$`)
)

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testKey {
		writeError(w, http.StatusUnauthorized, "Invalid API token.")
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
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
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
		writeError(w, http.StatusServiceUnavailable, "the process that made this request is dead")
		return
	}
	if ft == nil {
		f.serve(w, r, op, id)
		return
	}
	if ft.after {
		f.serve(httptest.NewRecorder(), r, op, id) // done, but the answer is lost
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
	writeError(w, status, "injected failure of "+op)
}

func route(r *http.Request) (op, id string) {
	p := r.URL.Path
	if m := instancePath.FindStringSubmatch(p); m != nil {
		switch r.Method {
		case http.MethodGet:
			return opGet, m[1]
		case http.MethodPatch:
			return opUpdate, m[1]
		case http.MethodDelete:
			return opDelete, m[1]
		}
	}
	if m := availPath.FindStringSubmatch(p); m != nil && r.Method == http.MethodGet {
		return opAvail, m[1]
	}
	switch {
	case p == "/v2/instances" && r.Method == http.MethodPost:
		return opCreate, ""
	case p == "/v2/instances" && r.Method == http.MethodGet:
		return opList, ""
	case (p == "/v2/account" || p == "/v2/os") && r.Method == http.MethodGet:
		return opCatalog, ""
	}
	return "", ""
}

// regions are the fake's regions and the plans each offers.
var regions = map[string][]string{
	"fra": {"vc2-2c-4gb", "vhf-2c-4gb", "vc2-1c-1gb"},
	"ams": {"vc2-2c-4gb", "vhf-2c-4gb"},
	"ewr": {"vc2-2c-4gb"},
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request, op, id string) {
	switch op {
	case opCatalog:
		if r.URL.Path == "/v2/account" {
			writeJSON(w, http.StatusOK, map[string]any{"account": govultr.Account{Name: "tester", Email: "tester@example.com"}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"os":   []govultr.OS{{ID: 2136, Name: "Debian 12 x64 (bookworm)", Arch: "x64", Family: "debian"}, {ID: 2284, Name: "Ubuntu 24.04 LTS x64", Arch: "x64", Family: "ubuntu"}},
			"meta": govultr.Meta{Total: 2, Links: &govultr.Links{}},
		})
	case opAvail:
		plans, ok := regions[id]
		if !ok {
			writeError(w, http.StatusNotFound, "Invalid region.")
			return
		}
		f.mu.Lock()
		avail := slices.DeleteFunc(slices.Clone(plans), func(p string) bool { return f.soldOut[p+"/"+id] })
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, govultr.PlanAvailability{AvailablePlans: avail})
	case opCreate:
		var req govultr.InstanceCreateReq
		if !decode(w, r, &req) {
			return
		}
		f.create(w, req)
	case opList:
		f.list(w, r)
	case opGet:
		f.mu.Lock()
		fi := f.instances[id]
		var inst govultr.Instance
		if fi != nil {
			if fi.inst.Status == "pending" { // booted by the first look
				fi.inst.Status, fi.inst.PowerStatus, fi.inst.ServerStatus, fi.inst.MainIP = "active", "running", "ok", fi.ip
			}
			if f.onGet != nil {
				f.onGet(&fi.inst)
			}
			inst = copyInstance(fi.inst)
		}
		f.mu.Unlock()
		if fi == nil {
			writeError(w, http.StatusNotFound, "Invalid instance-id.")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"instance": inst})
	case opUpdate:
		var req govultr.InstanceUpdateReq
		if !decode(w, r, &req) {
			return
		}
		f.mu.Lock()
		fi := f.instances[id]
		var inst govultr.Instance
		if fi != nil {
			if req.Tags != nil {
				fi.inst.Tags = slices.Clone(req.Tags)
				f.events = append(f.events, "tag instance "+id+" state="+labelsOf(fi.inst)["state"])
			}
			inst = copyInstance(fi.inst)
		}
		f.mu.Unlock()
		if fi == nil {
			writeError(w, http.StatusNotFound, "Invalid instance-id.")
			return
		}
		writeJSON(w, http.StatusAccepted, map[string]any{"instance": inst})
	case opDelete:
		f.mu.Lock()
		fi := f.instances[id]
		delete(f.instances, id)
		if fi != nil {
			f.events = append(f.events, "delete instance "+id)
		}
		f.mu.Unlock()
		if fi == nil {
			writeError(w, http.StatusNotFound, "Invalid instance-id.")
			return
		}
		if err := f.fleet.Halt(fi.ip); err != nil {
			f.t.Errorf("halt box of instance %s: %v", id, err)
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (f *fakeAPI) create(w http.ResponseWriter, req govultr.InstanceCreateReq) {
	if req.Region == "" || req.Plan == "" || req.OsID == 0 || req.UserData == "" || req.Label == "" {
		writeError(w, http.StatusBadRequest, "region, plan, os_id, label and user_data are required here")
		return
	}
	ud, err := base64.StdEncoding.DecodeString(req.UserData)
	if err != nil {
		writeError(w, http.StatusBadRequest, "user_data is not base64")
		return
	}
	f.mu.Lock()
	plans, ok := regions[req.Region]
	if !ok || !slices.Contains(plans, req.Plan) || f.soldOut[req.Plan+"/"+req.Region] {
		f.mu.Unlock()
		writeError(w, http.StatusBadRequest, "Plan is not available in the selected region.")
		return
	}
	f.creates = append(f.creates, req.Plan+"/"+req.Region)
	id := f.newIDLocked()
	ip := f.fleet.NewAddress()
	inst := govultr.Instance{
		ID: id, Label: req.Label, Hostname: req.Hostname, Plan: req.Plan, Region: req.Region, OsID: req.OsID,
		Status: "pending", PowerStatus: "running", ServerStatus: "none", MainIP: "0.0.0.0", Tags: slices.Clone(req.Tags),
		DateCreated: time.Now().UTC().Format(time.RFC3339),
	}
	f.instances[id] = &fakeInstance{inst: inst, userData: string(ud), ip: ip}
	f.order = append(f.order, id)
	f.events = append(f.events, "create instance "+id)
	noBoot, block := f.noBoot, slices.Clone(f.block)
	f.mu.Unlock()
	for _, p := range block {
		f.fleet.Block(ip, p)
	}
	if !noBoot {
		if err := f.fleet.Boot(ip, string(ud)); err != nil {
			f.t.Errorf("boot instance %s from its user data: %v", id, err)
		}
	}
	writeJSON(w, http.StatusAccepted, map[string]any{"instance": inst})
}

// list serves GET /v2/instances with Vultr's tag filter and cursor
// pagination (the cursor is the offset here).
func (f *fakeAPI) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	tag := q.Get("tag")
	perPage, _ := strconv.Atoi(q.Get("per_page"))
	if perPage <= 0 {
		perPage = 100
	}
	offset := 0
	if c := q.Get("cursor"); c != "" {
		var err error
		if offset, err = strconv.Atoi(c); err != nil {
			writeError(w, http.StatusBadRequest, "invalid cursor")
			return
		}
	}
	var all []govultr.Instance
	for _, inst := range f.instanceList() {
		if tag == "" || slices.Contains(inst.Tags, tag) {
			all = append(all, inst)
		}
	}
	page := all[min(offset, len(all)):min(offset+perPage, len(all))]
	links := &govultr.Links{}
	if offset+perPage < len(all) {
		links.Next = strconv.Itoa(offset + perPage)
	}
	writeJSON(w, http.StatusOK, map[string]any{"instances": append([]govultr.Instance{}, page...), "meta": govultr.Meta{Total: len(all), Links: links}})
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers as Vultr does: {"error": "...", "status": N}.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg, "status": status})
}

// ids drops instance IDs from log lines.
var ids = regexp.MustCompile(` [0-9a-f]{8}-[0-9a-f-]+`)

// events normalises the fake's mutation log: IDs dropped.
func events(api *fakeAPI) []string {
	var out []string
	for _, e := range api.log() {
		out = append(out, strings.TrimSpace(ids.ReplaceAllString(e, "")))
	}
	return out
}
