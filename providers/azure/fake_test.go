package azure_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

const (
	testToken        = "fake-arm-token-0123456789"
	testSubscription = "00000000-0000-0000-0000-000000000001"
)

// Kinds of resources the fake serves, as they appear in ARM paths.
const (
	kindGroup = "resourceGroups"
	kindVNet  = "virtualNetworks"
	kindNSG   = "networkSecurityGroups"
	kindPIP   = "publicIPAddresses"
	kindNIC   = "networkInterfaces"
	kindVM    = "virtualMachines"
	kindDisk  = "disks"
	kindSnap  = "snapshots"
	kindImage = "images"
)

// eventNames are the names of the lease resource kinds in the mutation
// log; the shared network is not logged.
var eventNames = map[string]string{kindPIP: "public-ip", kindNIC: "nic", kindVM: "vm", kindDisk: "disk", kindSnap: "snapshot", kindImage: "image"}

// fault makes one operation ("METHOD kind", e.g. "PUT virtualMachines",
// "LIST networkInterfaces") of the fake fail or hang.
type fault struct {
	code   string // ARM error code; "InternalServerError" when empty
	status int    // HTTP status; 500 when zero
	hang   bool   // block until the client gives up
	after  bool   // do the operation first, then fail or hang (the answer is lost)
	onHang func() // called when a hang starts
	match  string // only requests for this resource name
	times  int    // 0: every time
	fired  int
}

// fakeARM is a fake Azure Resource Manager for one subscription: resource
// groups, networks, public IPs, NICs, VMs, disks, snapshots and managed
// images as JSON documents, created synchronously (provisioningState
// Succeeded), with each VM's box served by a cloudtest fleet from its
// customData at its public IP.
//
// With disks set, each OS disk is a directory of its own,
// <disks>/disks/<name>, which is its VM's box's work root (a fake box's
// files are the host's, so two boxes with one work root would share
// them); the fake reports it in the VM's crabbox_work_root tag, the one
// liberty it takes with what the provider sent. A snapshot of a disk is
// a copy of its directory, and a VM made from an image of the snapshot
// starts with a copy of the copy.
type fakeARM struct {
	t     testing.TB
	fleet *cloudtest.Fleet
	URL   string
	srv   *httptest.Server

	mu           sync.Mutex
	res          map[string]map[string]map[string]any // kind -> lower-case name -> document
	events       []string
	faults       map[string]*fault
	spotCapacity string            // error code of every spot VM create, if set
	noBoot       bool              // VMs never serve SSH
	noAddress    bool              // public IPs never get an address
	keepNICs     bool              // VM deletion ignores the NIC's deleteOption
	onList       func(kind string) // called after a list is answered
	dead         bool              // every request fails (the process was killed)
	creates      []string
	disks        string          // "": boxes share the configured work root
	deallocated  map[string]bool // VMs deallocated, by lower-case name
}

func newFakeARM(t testing.TB) *fakeARM { return newFakeARMOf(t, cloudtest.NewFleet(t)) }

// newFakeARMOf is newFakeARM with the VMs' boxes served by fleet.
func newFakeARMOf(t testing.TB, fleet *cloudtest.Fleet) *fakeARM {
	f := &fakeARM{t: t, fleet: fleet, res: map[string]map[string]map[string]any{}, faults: map[string]*fault{}}
	f.srv = httptest.NewTLSServer(f)
	t.Cleanup(f.srv.Close)
	f.URL = f.srv.URL
	return f
}

func (f *fakeARM) setFault(op string, ft fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = &ft
}

func (f *fakeARM) kill(dead bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dead = dead
}

func (f *fakeARM) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeARM) attempts() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates)
}

// names returns the sorted names of the resources of kind.
func (f *fakeARM) names(kind string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, d := range f.res[kind] {
		out = append(out, d["name"].(string))
	}
	slices.Sort(out)
	return out
}

// doc returns a deep copy of a resource document, or nil.
func (f *fakeARM) doc(kind, name string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return clone(f.res[kind][strings.ToLower(name)])
}

// tags returns a resource's tags.
func (f *fakeARM) tags(kind, name string) map[string]string {
	d := f.doc(kind, name)
	out := map[string]string{}
	if t, ok := d["tags"].(map[string]any); ok {
		for k, v := range t {
			out[k], _ = v.(string)
		}
	}
	return out
}

// mergeTags sets tags on a resource directly.
func (f *fakeARM) mergeTags(kind, name string, tags map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.res[kind][strings.ToLower(name)]
	t, _ := d["tags"].(map[string]any)
	if t == nil {
		t = map[string]any{}
		d["tags"] = t
	}
	for k, v := range tags {
		t[k] = v
	}
}

// remove deletes a resource directly, unlogged.
func (f *fakeARM) remove(kind, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.res[kind], strings.ToLower(name))
}

// put stores a resource directly (one made by someone else).
func (f *fakeARM) put(kind, name string, doc map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.store(kind, name, doc)
}

func (f *fakeARM) store(kind, name string, doc map[string]any) map[string]any {
	doc = clone(doc)
	doc["name"] = name
	doc["id"] = f.id(kind, name)
	props, _ := doc["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
	}
	props["provisioningState"] = "Succeeded"
	doc["properties"] = props
	if f.res[kind] == nil {
		f.res[kind] = map[string]map[string]any{}
	}
	f.res[kind][strings.ToLower(name)] = doc
	return doc
}

func (f *fakeARM) id(kind, name string) string {
	sub := "/subscriptions/" + testSubscription
	switch kind {
	case kindGroup:
		return sub + "/resourceGroups/" + name
	case kindVM, kindDisk, kindSnap, kindImage:
		return sub + "/resourceGroups/crabbox/providers/Microsoft.Compute/" + kind + "/" + name
	}
	return sub + "/resourceGroups/crabbox/providers/Microsoft.Network/" + kind + "/" + name
}

func clone(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// route parses an ARM path into the resource kind and name ("" for a
// list).
func route(path string) (kind, name string, ok bool) {
	p := strings.Split(strings.Trim(path, "/"), "/")
	if len(p) < 4 || !strings.EqualFold(p[0], "subscriptions") || p[1] != testSubscription || !strings.EqualFold(p[2], "resourceGroups") {
		return "", "", false
	}
	if len(p) == 4 {
		return kindGroup, p[3], true
	}
	if len(p) < 7 || !strings.EqualFold(p[4], "providers") {
		return "", "", false
	}
	for _, k := range []string{kindVNet, kindNSG, kindPIP, kindNIC, kindVM, kindDisk, kindSnap, kindImage} {
		if strings.EqualFold(p[6], k) {
			kind = k
		}
	}
	switch {
	case kind == "":
		return "", "", false
	case len(p) == 7:
		return kind, "", true
	case len(p) == 8:
		return kind, p[7], true
	}
	return "", "", false
}

func (f *fakeARM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		writeError(w, http.StatusUnauthorized, "AuthenticationFailed", "no valid bearer token")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	path, action := r.URL.Path, ""
	if i := strings.LastIndex(path, "/"); r.Method == http.MethodPost && i >= 0 && (path[i+1:] == "deallocate" || path[i+1:] == "start") {
		path, action = path[:i], path[i+1:]
	}
	kind, name, ok := route(path)
	if ok && r.Method == http.MethodPost && (action == "" || kind != kindVM) {
		ok = false
	}
	if !ok || r.URL.Query().Get("api-version") == "" {
		writeError(w, http.StatusNotFound, "InvalidResourceType", "no route "+r.Method+" "+r.URL.Path)
		return
	}
	method := r.Method
	if name == "" && method == http.MethodGet {
		method = "LIST"
	}
	op := method + " " + kind
	if action != "" {
		op += "/" + action
	}
	f.mu.Lock()
	dead := f.dead
	ft := f.faults[op]
	if ft != nil && (ft.times > 0 && ft.fired >= ft.times || ft.match != "" && !strings.EqualFold(ft.match, name)) {
		ft = nil
	}
	if ft != nil {
		ft.fired++
	}
	f.mu.Unlock()
	if dead {
		writeError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the process that made this request is dead")
		return
	}
	serve := func(w http.ResponseWriter) {
		if action != "" {
			f.power(w, name, action)
			return
		}
		f.serve(w, method, kind, name, body)
	}
	if ft == nil {
		serve(w)
		return
	}
	if ft.after {
		serve(httptest.NewRecorder()) // done, but the answer is lost
	}
	if ft.hang {
		if ft.onHang != nil {
			ft.onHang()
		}
		<-r.Context().Done()
		return
	}
	code, status := ft.code, ft.status
	if code == "" {
		code = "InternalServerError"
	}
	if status == 0 {
		status = http.StatusInternalServerError
	}
	writeError(w, status, code, "injected failure of "+op)
}

func (f *fakeARM) serve(w http.ResponseWriter, method, kind, name string, body []byte) {
	f.mu.Lock()
	if kind != kindGroup && f.res[kindGroup]["crabbox"] == nil {
		f.mu.Unlock()
		writeError(w, http.StatusNotFound, "ResourceGroupNotFound", "resource group crabbox not found")
		return
	}
	docs := f.res[kind]
	doc := docs[strings.ToLower(name)]
	switch method {
	case "LIST":
		var out []map[string]any
		for _, k := range slices.Sorted(maps.Keys(docs)) {
			out = append(out, clone(docs[k]))
		}
		onList := f.onList
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"value": out})
		if onList != nil {
			onList(kind)
		}
	case http.MethodGet:
		f.mu.Unlock()
		if doc == nil {
			writeError(w, http.StatusNotFound, "ResourceNotFound", kind+" "+name+" not found")
			return
		}
		writeJSON(w, http.StatusOK, clone(doc))
	case http.MethodPut:
		var in map[string]any
		if err := json.Unmarshal(body, &in); err != nil {
			f.mu.Unlock()
			writeError(w, http.StatusBadRequest, "InvalidRequestContent", err.Error())
			return
		}
		if kind == kindVM {
			f.mu.Unlock()
			f.createVM(w, name, in)
			return
		}
		if doc != nil {
			f.mu.Unlock()
			writeError(w, http.StatusConflict, "Conflict", "the fake does not update "+kind)
			return
		}
		if msg := f.checkRefs(in); msg != "" {
			f.mu.Unlock()
			writeError(w, http.StatusBadRequest, "InvalidResourceReference", msg)
			return
		}
		if kind == kindDisk {
			if msg := f.diskOfSnapshot(name, in); msg != "" {
				f.mu.Unlock()
				writeError(w, http.StatusBadRequest, "InvalidParameter", msg)
				return
			}
		}
		if kind == kindSnap {
			if msg := f.snapshot(name, in); msg != "" {
				f.mu.Unlock()
				writeError(w, http.StatusBadRequest, "InvalidParameter", msg)
				return
			}
		}
		if kind == kindPIP && !f.noAddress {
			props, _ := in["properties"].(map[string]any)
			if props == nil {
				props = map[string]any{}
				in["properties"] = props
			}
			props["ipAddress"] = f.fleet.NewAddress()
		}
		if kind == kindVNet {
			props, _ := in["properties"].(map[string]any)
			subnets, _ := props["subnets"].([]any)
			for _, s := range subnets {
				if sm, ok := s.(map[string]any); ok {
					sm["id"] = f.id(kind, name) + "/subnets/" + fmt.Sprint(sm["name"])
				}
			}
		}
		out := f.store(kind, name, in)
		f.logEvent("create", kind, name)
		f.mu.Unlock()
		status := http.StatusCreated
		if kind == kindSnap || kind == kindDisk {
			status = http.StatusOK // a snapshot or disk PUT answers 200 or 202
		}
		writeJSON(w, status, out)
	case http.MethodPatch:
		var in struct {
			Tags       map[string]any `json:"tags"`
			Properties struct {
				StorageProfile struct {
					OSDisk map[string]any `json:"osDisk"`
				} `json:"storageProfile"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(body, &in); err != nil {
			f.mu.Unlock()
			writeError(w, http.StatusBadRequest, "InvalidRequestContent", err.Error())
			return
		}
		if doc == nil {
			f.mu.Unlock()
			writeError(w, http.StatusNotFound, "ResourceNotFound", kind+" "+name+" not found")
			return
		}
		if osDisk := in.Properties.StorageProfile.OSDisk; kind == kindVM && osDisk != nil {
			if msg := f.swapDisk(doc, osDisk); msg != "" {
				f.mu.Unlock()
				writeError(w, http.StatusConflict, "OperationNotAllowed", msg)
				return
			}
			f.events = append(f.events, "swap vm os-disk")
		}
		if in.Tags != nil {
			if wr, ok := doc["tags"].(map[string]any)["crabbox_work_root"]; ok && f.disks != "" {
				in.Tags["crabbox_work_root"] = wr // the fake's, not the client's
			}
			doc["tags"] = in.Tags
			if en, ok := eventNames[kind]; ok {
				f.events = append(f.events, fmt.Sprintf("tag %s state=%v", en, in.Tags["state"]))
			}
		}
		out := clone(doc)
		f.mu.Unlock()
		writeJSON(w, http.StatusOK, out)
	case http.MethodDelete:
		if doc == nil {
			f.mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if msg := f.inUse(kind, doc); msg != "" {
			f.mu.Unlock()
			writeError(w, http.StatusBadRequest, "InUse", msg)
			return
		}
		delete(docs, strings.ToLower(name))
		f.logEvent("delete", kind, name)
		var ip string
		if kind == kindVM {
			ip = f.deleteWithVM(doc)
		}
		f.mu.Unlock()
		if ip != "" {
			if err := f.fleet.Halt(ip); err != nil {
				f.t.Errorf("halt box of VM %s: %v", name, err)
			}
		}
		w.WriteHeader(http.StatusOK)
	default:
		f.mu.Unlock()
		writeError(w, http.StatusMethodNotAllowed, "MethodNotAllowed", method)
	}
}

func (f *fakeARM) logEvent(verb, kind, name string) {
	if en, ok := eventNames[kind]; ok {
		f.events = append(f.events, verb+" "+en)
	}
}

// checkRefs fails when a document refers to a resource ID the fake does
// not hold (subnets are checked through their network).
func (f *fakeARM) checkRefs(in map[string]any) string {
	var msg string
	walk(in, func(key, id string) {
		if key != "id" || msg != "" {
			return
		}
		id = strings.Split(id, "/subnets/")[0]
		found := false
		for _, docs := range f.res {
			for _, d := range docs {
				if strings.EqualFold(d["id"].(string), id) {
					found = true
				}
			}
		}
		if !found {
			msg = "no resource " + id
		}
	})
	return msg
}

// inUse refuses to delete a NIC a VM uses or a public IP a NIC uses, as
// Azure does.
func (f *fakeARM) inUse(kind string, doc map[string]any) string {
	users := map[string]string{kindNIC: kindVM, kindPIP: kindNIC}[kind]
	if users == "" {
		return ""
	}
	id := doc["id"].(string)
	var msg string
	for _, u := range f.res[users] {
		walk(u, func(key, v string) {
			if key == "id" && strings.EqualFold(v, id) {
				msg = fmt.Sprintf("%s is in use by %s", id, u["id"])
			}
		})
	}
	return msg
}

// deleteWithVM deletes what goes with a deleted VM (its NIC and OS disk
// with deleteOption Delete) and returns the VM's public address.
func (f *fakeARM) deleteWithVM(vm map[string]any) (ip string) {
	var v struct {
		Properties struct {
			StorageProfile struct {
				OSDisk struct{ Name, DeleteOption string } `json:"osDisk"`
			} `json:"storageProfile"`
			NetworkProfile struct {
				NetworkInterfaces []struct {
					ID         string `json:"id"`
					Properties struct{ DeleteOption string }
				} `json:"networkInterfaces"`
			} `json:"networkProfile"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(vm)
	_ = json.Unmarshal(b, &v)
	for _, n := range v.Properties.NetworkProfile.NetworkInterfaces {
		name := lastSegment(n.ID)
		ip = f.addressOfNIC(name)
		if n.Properties.DeleteOption == "Delete" && !f.keepNICs && f.res[kindNIC][strings.ToLower(name)] != nil {
			delete(f.res[kindNIC], strings.ToLower(name))
			f.logEvent("delete", kindNIC, name)
		}
	}
	if d := v.Properties.StorageProfile.OSDisk; d.Name != "" && d.DeleteOption == "Delete" && f.res[kindDisk][strings.ToLower(d.Name)] != nil {
		delete(f.res[kindDisk], strings.ToLower(d.Name))
		f.logEvent("delete", kindDisk, d.Name)
	}
	return ip
}

func (f *fakeARM) addressOfNIC(nic string) string {
	var pipID string
	walk(f.res[kindNIC][strings.ToLower(nic)], func(key, v string) {
		if key == "id" && strings.Contains(strings.ToLower(v), "/publicipaddresses/") {
			pipID = v
		}
	})
	pip := f.res[kindPIP][strings.ToLower(lastSegment(pipID))]
	if pip == nil {
		return ""
	}
	props, _ := pip["properties"].(map[string]any)
	ip, _ := props["ipAddress"].(string)
	return ip
}

func lastSegment(id string) string { return id[strings.LastIndex(id, "/")+1:] }

// createVM checks a VM's document as Azure would, stores it and its OS
// disk, and boots its box from customData at its public IP.
func (f *fakeARM) createVM(w http.ResponseWriter, name string, in map[string]any) {
	var v struct {
		Properties struct {
			Priority       string `json:"priority"`
			EvictionPolicy string `json:"evictionPolicy"`
			OSProfile      struct {
				CustomData         string `json:"customData"`
				LinuxConfiguration struct {
					DisablePasswordAuthentication bool `json:"disablePasswordAuthentication"`
					SSH                           struct {
						PublicKeys []struct{ KeyData string } `json:"publicKeys"`
					} `json:"ssh"`
				} `json:"linuxConfiguration"`
			} `json:"osProfile"`
			StorageProfile struct {
				ImageReference struct{ ID string }   `json:"imageReference"`
				OSDisk         struct{ Name string } `json:"osDisk"`
			} `json:"storageProfile"`
			NetworkProfile struct {
				NetworkInterfaces []struct {
					ID string `json:"id"`
				} `json:"networkInterfaces"`
			} `json:"networkProfile"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(in)
	_ = json.Unmarshal(b, &v)
	p := v.Properties
	userData, err := base64.StdEncoding.DecodeString(p.OSProfile.CustomData)
	switch {
	case err != nil || len(userData) == 0:
		writeError(w, http.StatusBadRequest, "InvalidParameter", "customData must be base64")
		return
	case !p.OSProfile.LinuxConfiguration.DisablePasswordAuthentication || len(p.OSProfile.LinuxConfiguration.SSH.PublicKeys) != 1:
		writeError(w, http.StatusBadRequest, "InvalidParameter", "the fake wants password login off and one SSH key")
		return
	case len(p.NetworkProfile.NetworkInterfaces) != 1 || p.StorageProfile.OSDisk.Name == "":
		writeError(w, http.StatusBadRequest, "InvalidParameter", "the fake wants one NIC and a named OS disk")
		return
	}
	f.mu.Lock()
	market := "regular"
	if p.Priority == "Spot" {
		market = "spot"
	}
	f.creates = append(f.creates, market)
	nic := lastSegment(p.NetworkProfile.NetworkInterfaces[0].ID)
	switch {
	case market == "spot" && f.spotCapacity != "":
		f.mu.Unlock()
		writeError(w, http.StatusConflict, f.spotCapacity, "no spot capacity for this size")
		return
	case f.res[kindNIC][strings.ToLower(nic)] == nil:
		f.mu.Unlock()
		writeError(w, http.StatusBadRequest, "InvalidResourceReference", "no NIC "+nic)
		return
	case f.res[kindVM][strings.ToLower(name)] != nil:
		f.mu.Unlock()
		writeError(w, http.StatusConflict, "PropertyChangeNotAllowed", "the fake does not update VMs")
		return
	}
	image := p.StorageProfile.ImageReference.ID
	if image != "" && f.res[kindImage][strings.ToLower(lastSegment(image))] == nil {
		f.mu.Unlock()
		writeError(w, http.StatusNotFound, "NotFound", "image "+image+" not found")
		return
	}
	if f.disks != "" {
		var err error
		if userData, err = f.attach(in, p.StorageProfile.OSDisk.Name, image, userData); err != nil {
			f.mu.Unlock()
			writeError(w, http.StatusBadRequest, "InvalidParameter", "disk: "+err.Error())
			return
		}
	}
	out := f.store(kindVM, name, in)
	f.events = append(f.events, "create vm "+market)
	f.store(kindDisk, p.StorageProfile.OSDisk.Name, map[string]any{})
	ip := f.addressOfNIC(nic)
	noBoot := f.noBoot
	f.mu.Unlock()
	if !noBoot && ip != "" {
		if err := f.fleet.Boot(ip, string(userData)); err != nil {
			f.t.Errorf("boot VM %s from its custom data: %v", name, err)
		}
	}
	writeJSON(w, http.StatusCreated, out)
}

// walk calls fn with every string value in v and its key.
func walk(v any, fn func(key, value string)) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if s, ok := x.(string); ok {
				fn(k, s)
			} else {
				walk(x, fn)
			}
		}
	case []any:
		for _, x := range t {
			walk(x, fn)
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	_ = json.NewEncoder(&buf).Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("x-ms-error-code", code)
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

// attach gives a new VM its OS disk, from the snapshot of its image when
// it has one, tags the VM with the disk's directory as its work root, and
// returns the custom data its box boots with. f.mu is held.
func (f *fakeARM) attach(vm map[string]any, disk, image string, userData []byte) ([]byte, error) {
	bs, err := cloud.ParseUserData(string(userData))
	if err != nil {
		return nil, err
	}
	root := filepath.Join(f.disks, "disks", disk)
	if image != "" {
		var snap string
		walk(f.res[kindImage][strings.ToLower(lastSegment(image))], func(key, v string) {
			if key == "id" && strings.Contains(strings.ToLower(v), "/snapshots/") {
				snap = lastSegment(v)
			}
		})
		err = os.CopyFS(root, os.DirFS(filepath.Join(f.disks, "snapshots", snap)))
	} else {
		err = os.MkdirAll(root, 0o755)
	}
	if err != nil {
		return nil, err
	}
	tags, _ := vm["tags"].(map[string]any)
	if tags == nil {
		tags = map[string]any{}
		vm["tags"] = tags
	}
	tags["crabbox_work_root"] = root
	bs.WorkRoot = root
	out, err := bs.UserData()
	return []byte(out), err
}

// snapshot checks a new snapshot's source disk and, with disks, copies
// the disk's directory; it returns what is wrong, if anything. f.mu is
// held.
func (f *fakeARM) snapshot(name string, in map[string]any) string {
	var v struct {
		Properties struct {
			CreationData struct {
				CreateOption     string `json:"createOption"`
				SourceResourceID string `json:"sourceResourceId"`
			} `json:"creationData"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(in)
	_ = json.Unmarshal(b, &v)
	c := v.Properties.CreationData
	src := lastSegment(c.SourceResourceID)
	if c.CreateOption != "Copy" || f.res[kindDisk][strings.ToLower(src)] == nil || !strings.EqualFold(f.id(kindDisk, src), c.SourceResourceID) {
		return fmt.Sprintf("the fake snapshots only disks it holds (createOption Copy), not %q", c.SourceResourceID)
	}
	if f.disks != "" {
		if err := os.CopyFS(filepath.Join(f.disks, "snapshots", name), os.DirFS(filepath.Join(f.disks, "disks", src))); err != nil {
			return err.Error()
		}
	}
	return ""
}

// diskOfSnapshot checks a new disk made of a snapshot and, with disks,
// copies the snapshot's directory; it returns what is wrong, if anything.
// f.mu is held.
func (f *fakeARM) diskOfSnapshot(name string, in map[string]any) string {
	var v struct {
		Properties struct {
			CreationData struct {
				CreateOption     string `json:"createOption"`
				SourceResourceID string `json:"sourceResourceId"`
			} `json:"creationData"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(in)
	_ = json.Unmarshal(b, &v)
	c := v.Properties.CreationData
	src := lastSegment(c.SourceResourceID)
	if c.CreateOption != "Copy" || f.res[kindSnap][strings.ToLower(src)] == nil || !strings.EqualFold(f.id(kindSnap, src), c.SourceResourceID) {
		return fmt.Sprintf("the fake makes disks only as copies of its snapshots, not of %q", c.SourceResourceID)
	}
	if f.disks != "" {
		if err := os.CopyFS(filepath.Join(f.disks, "disks", name), os.DirFS(filepath.Join(f.disks, "snapshots", src))); err != nil {
			return err.Error()
		}
	}
	return ""
}

// swapDisk makes osDisk (name, managedDisk.id) the OS disk of the
// deallocated VM doc; it returns what is wrong, if anything. f.mu is held.
func (f *fakeARM) swapDisk(doc, osDisk map[string]any) string {
	name, _ := osDisk["name"].(string)
	md, _ := osDisk["managedDisk"].(map[string]any)
	id, _ := md["id"].(string)
	if !f.deallocated[strings.ToLower(doc["name"].(string))] {
		return "the OS disk of a VM can be changed only while it is deallocated"
	}
	if name == "" || f.res[kindDisk][strings.ToLower(name)] == nil || !strings.EqualFold(f.id(kindDisk, name), id) {
		return fmt.Sprintf("no disk %q (%s)", name, id)
	}
	props := doc["properties"].(map[string]any)
	sp, _ := props["storageProfile"].(map[string]any)
	old, _ := sp["osDisk"].(map[string]any)
	if old == nil {
		old = map[string]any{}
		sp["osDisk"] = old
	}
	for k, v := range osDisk {
		old[k] = v
	}
	delete(sp, "imageReference")
	return ""
}

// power deallocates or starts a VM: deallocation stops its box, a start
// boots it again from its customData with the files of its OS disk.
func (f *fakeARM) power(w http.ResponseWriter, name, action string) {
	f.mu.Lock()
	doc := f.res[kindVM][strings.ToLower(name)]
	if doc == nil {
		f.mu.Unlock()
		writeError(w, http.StatusNotFound, "ResourceNotFound", "VM "+name+" not found")
		return
	}
	var v struct {
		Properties struct {
			OSProfile struct {
				CustomData string `json:"customData"`
			} `json:"osProfile"`
			StorageProfile struct {
				OSDisk struct{ Name string } `json:"osDisk"`
			} `json:"storageProfile"`
			NetworkProfile struct {
				NetworkInterfaces []struct {
					ID string `json:"id"`
				} `json:"networkInterfaces"`
			} `json:"networkProfile"`
		} `json:"properties"`
	}
	b, _ := json.Marshal(doc)
	_ = json.Unmarshal(b, &v)
	var ip string
	if nics := v.Properties.NetworkProfile.NetworkInterfaces; len(nics) > 0 {
		ip = f.addressOfNIC(lastSegment(nics[0].ID))
	}
	if f.deallocated == nil {
		f.deallocated = map[string]bool{}
	}
	if action == "deallocate" {
		f.deallocated[strings.ToLower(name)] = true
		f.events = append(f.events, "deallocate vm")
		f.mu.Unlock()
		if ip != "" {
			_ = f.fleet.Halt(ip)
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	delete(f.deallocated, strings.ToLower(name))
	f.events = append(f.events, "start vm")
	userData, _ := base64.StdEncoding.DecodeString(v.Properties.OSProfile.CustomData)
	if f.disks != "" {
		bs, err := cloud.ParseUserData(string(userData))
		if err != nil {
			f.mu.Unlock()
			writeError(w, http.StatusBadRequest, "InvalidParameter", err.Error())
			return
		}
		bs.WorkRoot = filepath.Join(f.disks, "disks", v.Properties.StorageProfile.OSDisk.Name)
		doc["tags"].(map[string]any)["crabbox_work_root"] = bs.WorkRoot
		s, _ := bs.UserData()
		userData = []byte(s)
	}
	noBoot := f.noBoot
	f.mu.Unlock()
	if !noBoot && ip != "" {
		if err := f.fleet.Boot(ip, string(userData)); err != nil {
			writeError(w, http.StatusInternalServerError, "InternalServerError", "boot: "+err.Error())
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}
