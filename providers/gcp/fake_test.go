package gcp_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

const project = "crabbox-test"

// Operations of the fake API, for faults.
const (
	opFirewallGet    = "firewalls.get"
	opFirewallInsert = "firewalls.insert"
	opFirewallDelete = "firewalls.delete"
	opInstanceInsert = "instances.insert"
	opInstanceGet    = "instances.get"
	opInstanceList   = "instances.list"
	opInstanceDelete = "instances.delete"
	opSetLabels      = "instances.setLabels"
	opOperationGet   = "operations.get"
	opImageInsert    = "machineImages.insert"
	opImageGet       = "machineImages.get"
	opImageList      = "machineImages.list"
	opImageDelete    = "machineImages.delete"
)

// fault makes one operation of the fake fail or hang.
type fault struct {
	status int    // HTTP status; 500 when zero
	reason string // googleapi error reason
	hang   bool   // block until the client gives up
	after  bool   // do the operation first, then fail or hang (the answer is lost)
	onHang func() // called when a hang starts
	times  int    // 0: every time
	fired  int
}

// fakeGCE is a fake Compute Engine API (the REST JSON of the SDK):
// firewall rules, instances with labels, label filters and fingerprints,
// machine images of instances, operations and errors, with each
// instance's box served by a cloudtest fleet from its user-data metadata.
//
// With disks set, each instance has a disk of its own: its box's work
// root is <disks>/instances/<zone>/<name> (a fake box's files are the
// host's, so two boxes with one work root would share them), which the
// fake reports in the instance's crabbox-work-root metadata, the one
// liberty it takes with what the provider sent. A machine image is a copy
// of that directory, and an instance made from it (sourceMachineImage)
// starts with a copy of the copy.
type fakeGCE struct {
	t     testing.TB
	fleet *cloudtest.Fleet
	URL   string

	mu        sync.Mutex
	nextOp    int
	instances map[string]*fakeInstance // by zone/name
	firewalls map[string]*computepb.Firewall
	ops       map[string]*computepb.Operation
	events    []string          // mutations, in order
	attempts  []string          // "zone/MODEL" of every insert
	faults    map[string]*fault // by operation
	capacity  map[string]string // "zone/MODEL" -> operation error code
	noBoot    bool              // instances never serve SSH
	noAddress bool              // instances never get an address
	pending   bool              // operations are answered RUNNING, DONE when read again
	opReads   int               // operations.get calls
	onGet     func(in *computepb.Instance)
	images    map[string]*computepb.MachineImage // by name
	disks     string                             // "": boxes share the configured work root
}

type fakeInstance struct {
	zone string
	in   *computepb.Instance
}

func newFakeGCE(t testing.TB) *fakeGCE { return newFakeGCEOf(t, cloudtest.NewFleet(t)) }

// newFakeGCEOf is newFakeGCE with the instances' boxes served by fleet.
func newFakeGCEOf(t testing.TB, fleet *cloudtest.Fleet) *fakeGCE {
	f := &fakeGCE{
		t: t, fleet: fleet,
		instances: map[string]*fakeInstance{}, firewalls: map[string]*computepb.Firewall{},
		ops: map[string]*computepb.Operation{}, faults: map[string]*fault{}, capacity: map[string]string{},
		images: map[string]*computepb.MachineImage{},
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeGCE) setFault(op string, ft fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = &ft
}

func (f *fakeGCE) clearFault(op string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.faults, op)
}

func (f *fakeGCE) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeGCE) operationReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opReads
}

func (f *fakeGCE) insertAttempts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.attempts)
}

// instanceList returns copies of the instances, sorted by zone/name.
func (f *fakeGCE) instanceList() []*computepb.Instance {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*computepb.Instance
	for _, k := range slices.Sorted(maps.Keys(f.instances)) {
		out = append(out, proto.CloneOf(f.instances[k].in))
	}
	return out
}

func (f *fakeGCE) firewallList() []*computepb.Firewall {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*computepb.Firewall
	for _, k := range slices.Sorted(maps.Keys(f.firewalls)) {
		out = append(out, proto.CloneOf(f.firewalls[k]))
	}
	return out
}

// addInstance puts an instance into the fake directly (one made by
// someone else), running and without a box.
func (f *fakeGCE) addInstance(zone, name string, labels map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := &computepb.Instance{
		Name: proto.String(name), Status: proto.String("RUNNING"), Labels: labels,
		NetworkInterfaces: []*computepb.NetworkInterface{{AccessConfigs: []*computepb.AccessConfig{{NatIP: proto.String(f.fleet.NewAddress())}}}},
	}
	in.LabelFingerprint = proto.String(fingerprint(labels))
	f.instances[zone+"/"+name] = &fakeInstance{zone: zone, in: in}
}

// addFirewall puts a firewall rule into the fake directly.
func (f *fakeGCE) addFirewall(fw *computepb.Firewall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.firewalls[fw.GetName()] = fw
}

func fingerprint(labels map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(h, "%s=%s\n", k, labels[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

var (
	firewallsPath = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/global/firewalls(?:/([^/]+))?$`)
	instancesPath = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/zones/([^/]+)/instances(?:/([^/]+))?(/setLabels)?$`)
	imagesPath    = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/global/machineImages(?:/([^/]+))?$`)
	opsPath       = regexp.MustCompile(`^/compute/v1/projects/([^/]+)/(?:global|zones/[^/]+)/operations/([^/]+)$`)
	filterTerm    = regexp.MustCompile(`^\(labels\.([a-z][a-z0-9_-]*) = "([a-z0-9_-]*)"\)$`)
)

// route names the operation of r.
func route(r *http.Request) (op string, m []string) {
	if m = firewallsPath.FindStringSubmatch(r.URL.Path); m != nil {
		switch {
		case r.Method == http.MethodGet && m[2] != "":
			return opFirewallGet, m
		case r.Method == http.MethodPost && m[2] == "":
			return opFirewallInsert, m
		case r.Method == http.MethodDelete && m[2] != "":
			return opFirewallDelete, m
		}
	}
	if m = instancesPath.FindStringSubmatch(r.URL.Path); m != nil {
		switch {
		case r.Method == http.MethodPost && m[3] != "" && m[4] != "":
			return opSetLabels, m
		case r.Method == http.MethodGet && m[3] != "" && m[4] == "":
			return opInstanceGet, m
		case r.Method == http.MethodGet && m[3] == "":
			return opInstanceList, m
		case r.Method == http.MethodPost && m[3] == "":
			return opInstanceInsert, m
		case r.Method == http.MethodDelete && m[3] != "" && m[4] == "":
			return opInstanceDelete, m
		}
	}
	if m = imagesPath.FindStringSubmatch(r.URL.Path); m != nil {
		switch {
		case r.Method == http.MethodGet && m[2] != "":
			return opImageGet, m
		case r.Method == http.MethodGet && m[2] == "":
			return opImageList, m
		case r.Method == http.MethodPost && m[2] == "":
			return opImageInsert, m
		case r.Method == http.MethodDelete && m[2] != "":
			return opImageDelete, m
		}
	}
	if m = opsPath.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodGet {
		return opOperationGet, m
	}
	return "", nil
}

func (f *fakeGCE) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "" {
		writeError(w, http.StatusBadRequest, "badRequest", "the fake wants unauthenticated requests")
		return
	}
	// Reading the whole body lets the server notice a client that gives
	// up (it watches the connection only once the body is consumed).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	op, m := route(r)
	if op == "" {
		writeError(w, http.StatusNotFound, "notFound", "no route "+r.Method+" "+r.URL.Path)
		return
	}
	if m[1] != project {
		writeError(w, http.StatusForbidden, "forbidden", "no access to project "+m[1])
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
		f.serve(w, r, op, m, body)
		return
	}
	if ft.after {
		f.serve(httptest.NewRecorder(), r, op, m, body)
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
	writeError(w, status, ft.reason, "injected fault")
}

func writeError(w http.ResponseWriter, status int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
		"code": status, "message": msg, "errors": []map[string]string{{"reason": reason, "message": msg, "domain": "global"}},
	}})
}

func writeProto(w http.ResponseWriter, msg proto.Message) {
	b, err := protojson.Marshal(msg)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "backendError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// serve does operation op.
func (f *fakeGCE) serve(w http.ResponseWriter, r *http.Request, op string, m []string, body []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch op {
	case opFirewallGet:
		fw := f.firewalls[m[2]]
		if fw == nil {
			writeError(w, http.StatusNotFound, "notFound", "firewall "+m[2]+" not found")
			return
		}
		writeProto(w, fw)
	case opFirewallInsert:
		var fw computepb.Firewall
		if err := protojson.Unmarshal(body, &fw); err != nil || fw.GetName() == "" {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("bad firewall: %v", err))
			return
		}
		if f.firewalls[fw.GetName()] != nil {
			writeError(w, http.StatusConflict, "alreadyExists", "firewall "+fw.GetName()+" already exists")
			return
		}
		f.firewalls[fw.GetName()] = &fw
		f.events = append(f.events, "insert firewall")
		writeProto(w, f.newOp(""))
	case opFirewallDelete:
		if f.firewalls[m[2]] == nil {
			writeError(w, http.StatusNotFound, "notFound", "firewall "+m[2]+" not found")
			return
		}
		delete(f.firewalls, m[2])
		f.events = append(f.events, "delete firewall")
		writeProto(w, f.newOp(""))
	case opInstanceInsert:
		f.insert(w, r, m[2], body)
	case opInstanceGet:
		fi := f.instances[m[2]+"/"+m[3]]
		if fi == nil {
			writeError(w, http.StatusNotFound, "notFound", "instance "+m[3]+" not found")
			return
		}
		in := proto.CloneOf(fi.in)
		if f.onGet != nil {
			f.onGet(in)
		}
		writeProto(w, in)
	case opInstanceList:
		want, ok := labelFilter(w, r)
		if !ok {
			return
		}
		list := &computepb.InstanceList{}
		for _, k := range slices.Sorted(maps.Keys(f.instances)) {
			fi := f.instances[k]
			if fi.zone != m[2] {
				continue
			}
			match := true
			for lk, lv := range want {
				if fi.in.GetLabels()[lk] != lv {
					match = false
				}
			}
			if match {
				list.Items = append(list.Items, fi.in)
			}
		}
		writeProto(w, list)
	case opInstanceDelete:
		key := m[2] + "/" + m[3]
		fi := f.instances[key]
		if fi == nil {
			writeError(w, http.StatusNotFound, "notFound", "instance "+m[3]+" not found")
			return
		}
		delete(f.instances, key)
		if ip := natIP(fi.in); ip != "" {
			f.fleet.Halt(ip)
		}
		f.events = append(f.events, "delete instance")
		writeProto(w, f.newOp(m[2]))
	case opSetLabels:
		fi := f.instances[m[2]+"/"+m[3]]
		if fi == nil {
			writeError(w, http.StatusNotFound, "notFound", "instance "+m[3]+" not found")
			return
		}
		var req computepb.InstancesSetLabelsRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, "invalid", err.Error())
			return
		}
		if req.GetLabelFingerprint() != fi.in.GetLabelFingerprint() {
			writeError(w, http.StatusPreconditionFailed, "conditionNotMet", "labels fingerprint either invalid or resource labels have changed")
			return
		}
		for k, v := range req.GetLabels() {
			if strings.ToLower(k) != k || strings.ToLower(v) != v {
				writeError(w, http.StatusBadRequest, "invalid", "label "+k+"="+v+" is not lowercase")
				return
			}
		}
		old := fi.in.GetLabels()
		fi.in.Labels = req.GetLabels()
		fi.in.LabelFingerprint = proto.String(fingerprint(fi.in.Labels))
		var changed []string
		for _, k := range slices.Sorted(maps.Keys(fi.in.Labels)) {
			if k != "last_touched_at" && k != "expires_at" && k != "ssh_port" && old[k] != fi.in.Labels[k] {
				changed = append(changed, k+"="+fi.in.Labels[k])
			}
		}
		f.events = append(f.events, strings.TrimSpace("label instance "+strings.Join(changed, " ")))
		writeProto(w, f.newOp(m[2]))
	case opImageInsert, opImageGet, opImageList, opImageDelete:
		f.serveImages(w, r, op, m, body)
	case opOperationGet:
		o := f.ops[m[2]]
		if o == nil {
			writeError(w, http.StatusNotFound, "notFound", "operation "+m[2]+" not found")
			return
		}
		f.opReads++
		writeProto(w, o)
	}
}

func (f *fakeGCE) insert(w http.ResponseWriter, r *http.Request, zone string, body []byte) {
	var in computepb.Instance
	if err := protojson.Unmarshal(body, &in); err != nil || in.GetName() == "" {
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("bad instance: %v", err))
		return
	}
	model := in.GetScheduling().GetProvisioningModel()
	f.attempts = append(f.attempts, zone+"/"+model)
	if code := f.capacity[zone+"/"+model]; code != "" {
		writeProto(w, f.newOp(zone, &computepb.Errors{Code: proto.String(code), Message: proto.String("no " + model + " capacity in " + zone)}))
		return
	}
	key := zone + "/" + in.GetName()
	if f.instances[key] != nil {
		writeError(w, http.StatusConflict, "alreadyExists", "instance "+in.GetName()+" already exists")
		return
	}
	for k, v := range in.GetLabels() {
		if strings.ToLower(k) != k || strings.ToLower(v) != v {
			writeError(w, http.StatusBadRequest, "invalid", "label "+k+"="+v+" is not lowercase")
			return
		}
	}
	var source string
	if ref := r.URL.Query().Get("sourceMachineImage"); ref != "" {
		if source = path.Base(ref); f.images[source] == nil {
			writeError(w, http.StatusNotFound, "notFound", "The resource '"+ref+"' was not found")
			return
		}
	}
	userData, err := f.attach(zone, &in, source)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid", "disk: "+err.Error())
		return
	}
	in.Status = proto.String("RUNNING")
	in.LabelFingerprint = proto.String(fingerprint(in.GetLabels()))
	if f.noAddress {
		in.Status = proto.String("STAGING")
	} else {
		ip := f.fleet.NewAddress()
		in.NetworkInterfaces[0].AccessConfigs[0].NatIP = proto.String(ip)
		if !f.noBoot {
			if err := f.fleet.Boot(ip, userData); err != nil {
				writeError(w, http.StatusBadRequest, "invalid", "boot: "+err.Error())
				return
			}
		}
	}
	f.instances[key] = &fakeInstance{zone: zone, in: &in}
	f.events = append(f.events, "insert instance")
	writeProto(w, f.newOp(zone))
}

// newOp records a finished operation, failed with errs if any, and returns
// it as the answer to the call that started it: RUNNING when f.pending.
func (f *fakeGCE) newOp(zone string, errs ...*computepb.Errors) *computepb.Operation {
	f.nextOp++
	o := &computepb.Operation{Name: proto.String(fmt.Sprintf("operation-%d", f.nextOp)), Status: computepb.Operation_DONE.Enum()}
	if len(errs) > 0 {
		o.HttpErrorStatusCode = proto.Int32(503)
		o.Error = &computepb.Error{Errors: errs}
	}
	if zone != "" {
		o.Zone = proto.String(zone)
	}
	f.ops[o.GetName()] = o
	if f.pending {
		running := proto.CloneOf(o)
		running.Status = computepb.Operation_RUNNING.Enum()
		running.Error, running.HttpErrorStatusCode = nil, nil
		return running
	}
	return o
}

func natIP(in *computepb.Instance) string {
	for _, ni := range in.GetNetworkInterfaces() {
		for _, ac := range ni.GetAccessConfigs() {
			if ac.GetNatIP() != "" {
				return ac.GetNatIP()
			}
		}
	}
	return ""
}

func metadata(in *computepb.Instance, key string) string {
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() == key {
			return it.GetValue()
		}
	}
	return ""
}

// labelFilter reads the label equalities of a list request's filter; on a
// filter it does not understand it answers 400 and returns false.
func labelFilter(w http.ResponseWriter, r *http.Request) (map[string]string, bool) {
	want := map[string]string{}
	if flt := r.URL.Query().Get("filter"); flt != "" {
		for term := range strings.SplitSeq(flt, " AND ") {
			tm := filterTerm.FindStringSubmatch(term)
			if tm == nil {
				writeError(w, http.StatusBadRequest, "invalid", "bad filter term "+term)
				return nil, false
			}
			want[tm[1]] = tm[2]
		}
	}
	return want, true
}

// attach gives a new instance its disk (from the machine image source
// when set) and returns the user data its box boots with. f.mu is held.
func (f *fakeGCE) attach(zone string, in *computepb.Instance, source string) (string, error) {
	userData := metadata(in, "user-data")
	if f.disks == "" {
		return userData, nil
	}
	bs, err := cloud.ParseUserData(userData)
	if err != nil {
		return "", err
	}
	root := filepath.Join(f.disks, "instances", zone, in.GetName())
	if source != "" {
		err = os.CopyFS(root, os.DirFS(filepath.Join(f.disks, "images", source)))
	} else {
		err = os.MkdirAll(root, 0o755)
	}
	if err != nil {
		return "", err
	}
	bs.WorkRoot = root
	for _, it := range in.GetMetadata().GetItems() {
		if it.GetKey() == "crabbox-work-root" {
			it.Value = proto.String(root)
		}
	}
	return bs.UserData()
}

// imageList returns copies of the machine images, sorted by name.
func (f *fakeGCE) imageList() []*computepb.MachineImage {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*computepb.MachineImage
	for _, k := range slices.Sorted(maps.Keys(f.images)) {
		out = append(out, proto.CloneOf(f.images[k]))
	}
	return out
}

// serveImages does a machineImages operation. f.mu is held.
func (f *fakeGCE) serveImages(w http.ResponseWriter, r *http.Request, op string, m []string, body []byte) {
	switch op {
	case opImageInsert:
		var im computepb.MachineImage
		if err := protojson.Unmarshal(body, &im); err != nil || im.GetName() == "" {
			writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("bad machine image: %v", err))
			return
		}
		if f.images[im.GetName()] != nil {
			writeError(w, http.StatusConflict, "alreadyExists", "machine image "+im.GetName()+" already exists")
			return
		}
		src := instanceRef.FindStringSubmatch(im.GetSourceInstance())
		if src == nil {
			writeError(w, http.StatusBadRequest, "invalid", "sourceInstance "+im.GetSourceInstance()+" is not an instance")
			return
		}
		fi := f.instances[src[2]+"/"+src[3]]
		if src[1] != project || fi == nil {
			writeError(w, http.StatusNotFound, "notFound", "The resource '"+im.GetSourceInstance()+"' was not found")
			return
		}
		for k, v := range im.GetLabels() {
			if strings.ToLower(k) != k || strings.ToLower(v) != v {
				writeError(w, http.StatusBadRequest, "invalid", "label "+k+"="+v+" is not lowercase")
				return
			}
		}
		if f.disks != "" {
			if err := os.CopyFS(filepath.Join(f.disks, "images", im.GetName()), os.DirFS(filepath.Join(f.disks, "instances", src[2], src[3]))); err != nil {
				writeError(w, http.StatusInternalServerError, "backendError", err.Error())
				return
			}
		}
		im.Status = proto.String("READY")
		im.CreationTimestamp = proto.String("2026-01-02T03:04:05.000-07:00")
		im.TotalStorageBytes = proto.Int64(1 << 30)
		im.LabelFingerprint = proto.String(fingerprint(im.GetLabels()))
		f.images[im.GetName()] = &im
		f.events = append(f.events, "insert machine image")
		writeProto(w, f.newOp(""))
	case opImageGet:
		im := f.images[m[2]]
		if im == nil {
			writeError(w, http.StatusNotFound, "notFound", "machine image "+m[2]+" not found")
			return
		}
		writeProto(w, im)
	case opImageList:
		want, ok := labelFilter(w, r)
		if !ok {
			return
		}
		list := &computepb.MachineImageList{}
		for _, k := range slices.Sorted(maps.Keys(f.images)) {
			if hasAll(f.images[k].GetLabels(), want) {
				list.Items = append(list.Items, f.images[k])
			}
		}
		writeProto(w, list)
	case opImageDelete:
		if f.images[m[2]] == nil {
			writeError(w, http.StatusNotFound, "notFound", "machine image "+m[2]+" not found")
			return
		}
		delete(f.images, m[2])
		f.events = append(f.events, "delete machine image")
		writeProto(w, f.newOp(""))
	}
}

var instanceRef = regexp.MustCompile(`^(?:https://[^/]+/compute/v1/)?projects/([^/]+)/zones/([^/]+)/instances/([^/]+)$`)

func hasAll(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}
