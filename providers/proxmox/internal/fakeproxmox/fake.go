// Package fakeproxmox is a Proxmox VE API server for tests: the part of
// the API a lease uses, written from Proxmox VE's published API
// description, the API viewer's schema (https://pve.proxmox.com/pve-docs/
// api-viewer/, its data file api-viewer/apidata.js in git://git.proxmox.
// com/git/pve-docs.git, read at commit e5010dcea566a205770572cfbc5fe0af220d5077),
// and from the API's documented conventions (https://pve.proxmox.com/wiki/
// Proxmox_VE_API): every answer is a JSON object whose "data" member is the
// result, API tokens are sent as "Authorization: PVEAPIToken=USER@REALM!
// TOKENID=SECRET", and an operation that takes time answers with the UPID
// of a task whose state /nodes/{node}/tasks/{upid}/status reports.
//
// Served (paths under /api2/json; parameters as JSON or form data, as the
// API takes both, checked against the schema: unknown ones are refused,
// as the schema's additionalProperties 0 says):
//
//	GET    /version, /nodes, /cluster/nextid, /cluster/resources?type=vm
//	POST   /nodes/{node}/qemu/{vmid}/clone              newid, name, target, full
//	GET    /nodes/{node}/qemu/{vmid}/status/current
//	POST   /nodes/{node}/qemu/{vmid}/config (a task), PUT (synchronous)
//	       cores, memory, tags (pve-tag-list), sshkeys (urlencoded),
//	       ipconfig0, agent, name, description
//	POST   /nodes/{node}/qemu/{vmid}/status/start, status/stop
//	POST   /nodes/{node}/qemu/{vmid}/agent/ping, agent/exec (command, input-data <= 65536)
//	GET    /nodes/{node}/qemu/{vmid}/agent/network-get-interfaces
//	DELETE /nodes/{node}/qemu/{vmid}                    purge, destroy-unreferenced-disks
//	GET    /nodes/{node}/tasks/{upid}/status
//
// Tasks finish at once. A VM's box is a cloudtest box at the address the
// guest agent reports: agent/exec of /bin/sh with input-data boots it
// with that script (cloud-init user data cannot be uploaded through the
// API, so a bootstrap reaches a VM through its guest agent; the fake does
// not run the shell's arguments, like crabbox's wait for cloud-init). Behaviour
// the schema does not describe follows qemu-server: a running VM is not
// destroyed, and a missing VM's error says its configuration file does
// not exist (status 500).
package fakeproxmox

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// VM is one VM (or template) of the fake cluster.
type VM struct {
	VMID               int
	Node, Name         string
	Template           bool
	Cores, MemoryMiB   int
	Tags               string
	SSHKeys, IPConfig0 string
	Agent              bool
	Status             string // "stopped" or "running"
	IPv4               string
	Booted             bool
}

// Start is one start attempt: the VM's cores, memory and node.
type Start struct {
	Cores, MemoryMiB int
	Node             string
}

// Server is a fake Proxmox VE cluster. It is safe for concurrent use.
type Server struct {
	fleet *cloudtest.Fleet
	auth  string
	nodes []string

	mu     sync.Mutex
	vms    map[int]*VM
	tasks  map[string]string // UPID -> exit status
	pid    int
	full   map[Start]bool
	noBoot bool
	starts []Start
}

// New returns a cluster of nodes accepting the API token token
// (USER@REALM!TOKENID=SECRET), whose VMs' boxes fleet serves.
func New(fleet *cloudtest.Fleet, token string, nodes ...string) *Server {
	return &Server{fleet: fleet, auth: "PVEAPIToken=" + token, nodes: nodes, vms: map[int]*VM{}, tasks: map[string]string{}, full: map[Start]bool{}, pid: 4000}
}

// AddTemplate adds a template VM vmid on node.
func (s *Server) AddTemplate(vmid int, node, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vms[vmid] = &VM{VMID: vmid, Node: node, Name: name, Template: true, Cores: 1, MemoryMiB: 512, Status: "stopped", Agent: true}
}

// VMs returns the VMs that are not templates, by VM ID.
func (s *Server) VMs() []VM {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []VM
	for _, id := range slices.Sorted(maps.Keys(s.vms)) {
		if !s.vms[id].Template {
			out = append(out, *s.vms[id])
		}
	}
	return out
}

// Starts returns every start attempt, in order.
func (s *Server) Starts() []Start {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts)
}

// SetFull makes starts of VMs of these cores and memory on node fail for
// lack of memory.
func (s *Server) SetFull(st Start) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full[st] = true
}

// SetNoBoot makes the guest agent run no bootstrap: boxes never serve SSH.
func (s *Server) SetNoBoot() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noBoot = true
}

var (
	vmPath    = regexp.MustCompile(`^/nodes/([^/]+)/qemu/([0-9]+)(/.*)?$`)
	taskPath  = regexp.MustCompile(`^/nodes/([^/]+)/tasks/([^/]+)/status$`)
	tagRE     = regexp.MustCompile(`^(?i)[a-z0-9_][a-z0-9_\-+.]*$`) // pve-common's pve-tag
	dnsNameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$`)
)

// fail writes an error answer: the message in "message", parameter
// errors in "errors", "data" null.
func fail(w http.ResponseWriter, status int, msg string, errs map[string]string) {
	body := map[string]any{"data": nil, "message": msg + "\n"}
	if errs != nil {
		body["errors"] = errs
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func reply(w http.ResponseWriter, data any) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
}

// params are a request's parameters: the query, and the body as JSON or
// form data. Values are strings, or []string for arrays.
func params(r *http.Request) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range r.URL.Query() {
		out[k] = v[len(v)-1]
	}
	if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodDelete {
		return out, nil
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil && err.Error() != "EOF" {
			return nil, err
		}
		for k, v := range body {
			switch x := v.(type) {
			case []any:
				var l []string
				for _, e := range x {
					l = append(l, fmt.Sprint(e))
				}
				out[k] = l
			case bool:
				out[k] = map[bool]string{true: "1", false: "0"}[x]
			case float64:
				out[k] = strconv.FormatFloat(x, 'f', -1, 64)
			case nil:
			default:
				out[k] = fmt.Sprint(x)
			}
		}
		return out, nil
	}
	if err := r.ParseForm(); err != nil {
		return nil, err
	}
	for k, v := range r.PostForm {
		if len(v) > 1 {
			out[k] = v
		} else {
			out[k] = v[0]
		}
	}
	return out, nil
}

// check refuses parameters the schema does not define for the route.
func check(w http.ResponseWriter, p map[string]any, allowed ...string) bool {
	errs := map[string]string{}
	for k := range p {
		if !slices.Contains(allowed, k) {
			errs[k] = "property is not defined in schema and the schema does not allow additional properties"
		}
	}
	if len(errs) > 0 {
		fail(w, http.StatusBadRequest, "Parameter verification failed.", errs)
		return false
	}
	return true
}

func str(p map[string]any, k string) string { s, _ := p[k].(string); return s }

// task records a finished task on node and returns its UPID (PVE's
// UPID:node:pid:pstart:starttime:type:id:user: form).
func (s *Server) task(node, typ string, vmid int, exit string) string {
	s.pid++
	upid := fmt.Sprintf("UPID:%s:%08X:%08X:%08X:%s:%d:root@pam!crabbox:", node, s.pid, s.pid*7, 0x65000000+s.pid, typ, vmid)
	s.tasks[upid] = exit
	return upid
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != s.auth {
		fail(w, http.StatusUnauthorized, "authentication failure", nil)
		return
	}
	p, err := params(r)
	if err != nil {
		fail(w, http.StatusBadRequest, "bad request body: "+err.Error(), nil)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/api2/json")
	if !ok {
		fail(w, http.StatusNotImplemented, "Method '"+r.Method+" "+r.URL.Path+"' not implemented", nil)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && path == "/version":
		reply(w, map[string]any{"version": "9.0.0", "release": "9.0", "repoid": "0123abcd"})
	case r.Method == http.MethodGet && path == "/nodes":
		var out []map[string]any
		for _, n := range s.nodes {
			out = append(out, map[string]any{"node": n, "status": "online", "maxcpu": 16, "maxmem": 64 << 30})
		}
		reply(w, out)
	case r.Method == http.MethodGet && path == "/cluster/nextid":
		id := 100
		for s.vms[id] != nil {
			id++
		}
		reply(w, id)
	case r.Method == http.MethodGet && path == "/cluster/resources":
		if t := str(p, "type"); t != "" && t != "vm" {
			reply(w, []any{})
			return
		}
		out := []map[string]any{}
		for _, id := range slices.Sorted(maps.Keys(s.vms)) {
			vm := s.vms[id]
			out = append(out, map[string]any{
				"id": "qemu/" + strconv.Itoa(id), "type": "qemu", "vmid": id, "node": vm.Node, "name": vm.Name,
				"status": vm.Status, "tags": vm.Tags, "template": map[bool]int{true: 1, false: 0}[vm.Template],
			})
		}
		reply(w, out)
	case taskPath.MatchString(path):
		m := taskPath.FindStringSubmatch(path)
		upid, _ := url.PathUnescape(m[2])
		exit, ok := s.tasks[upid]
		if r.Method != http.MethodGet || !ok || strings.Split(upid, ":")[1] != m[1] {
			fail(w, http.StatusInternalServerError, "no such task", nil)
			return
		}
		reply(w, map[string]any{"upid": upid, "node": m[1], "status": "stopped", "exitstatus": exit, "type": strings.Split(upid, ":")[5], "user": "root@pam!crabbox"})
	case vmPath.MatchString(path):
		m := vmPath.FindStringSubmatch(path)
		id, _ := strconv.Atoi(m[2])
		vm := s.vms[id]
		if vm == nil || vm.Node != m[1] {
			fail(w, http.StatusInternalServerError, fmt.Sprintf("Configuration file 'nodes/%s/qemu-server/%d.conf' does not exist", m[1], id), nil)
			return
		}
		s.serveVM(w, r, vm, m[3], p)
	default:
		fail(w, http.StatusNotImplemented, "Method '"+r.Method+" "+path+"' not implemented", nil)
	}
}

// serveVM serves the routes of one VM (s.mu held).
func (s *Server) serveVM(w http.ResponseWriter, r *http.Request, vm *VM, sub string, p map[string]any) {
	route := r.Method + " " + sub
	switch route {
	case "POST /clone":
		if !check(w, p, "newid", "name", "target", "full", "description", "pool", "snapname", "storage", "format", "bwlimit") {
			return
		}
		newid, err := strconv.Atoi(str(p, "newid"))
		if err != nil || newid < 100 || newid > 999999999 {
			fail(w, http.StatusBadRequest, "Parameter verification failed.", map[string]string{"newid": "value must be a VM ID from 100 to 999999999"})
			return
		}
		name, target := str(p, "name"), vm.Node
		if name != "" && !dnsNameRE.MatchString(name) {
			fail(w, http.StatusBadRequest, "Parameter verification failed.", map[string]string{"name": "value does not look like a valid DNS name"})
			return
		}
		if t := str(p, "target"); t != "" {
			if !slices.Contains(s.nodes, t) {
				fail(w, http.StatusBadRequest, "Parameter verification failed.", map[string]string{"target": "no such cluster node '" + t + "'"})
				return
			}
			target = t
		}
		if s.vms[newid] != nil {
			fail(w, http.StatusInternalServerError, fmt.Sprintf("unable to create VM %d: config file already exists", newid), nil)
			return
		}
		s.vms[newid] = &VM{VMID: newid, Node: target, Name: name, Cores: vm.Cores, MemoryMiB: vm.MemoryMiB, Tags: vm.Tags, Agent: vm.Agent, Status: "stopped", IPv4: s.fleet.NewAddress()}
		reply(w, s.task(vm.Node, "qmclone", vm.VMID, "OK"))
	case "GET /status/current":
		reply(w, map[string]any{"vmid": vm.VMID, "name": vm.Name, "status": vm.Status, "qmpstatus": vm.Status,
			"tags": vm.Tags, "agent": map[bool]int{true: 1, false: 0}[vm.Agent], "template": map[bool]int{true: 1, false: 0}[vm.Template]})
	case "POST /config", "PUT /config":
		if !check(w, p, "cores", "memory", "tags", "sshkeys", "ipconfig0", "agent", "name", "description", "digest", "delete") {
			return
		}
		if errs := s.configure(vm, p); errs != nil {
			fail(w, http.StatusBadRequest, "Parameter verification failed.", errs)
			return
		}
		if r.Method == http.MethodPut {
			reply(w, nil)
			return
		}
		reply(w, s.task(vm.Node, "qmconfig", vm.VMID, "OK"))
	case "POST /status/start":
		st := Start{Cores: vm.Cores, MemoryMiB: vm.MemoryMiB, Node: vm.Node}
		s.starts = append(s.starts, st)
		exit := "OK"
		switch {
		case vm.Template:
			exit = "you can't start a vm if it's a template"
		case vm.Status == "running":
			exit = fmt.Sprintf("VM %d already running", vm.VMID)
		case s.full[st]:
			exit = fmt.Sprintf("start failed: QEMU exited with code 1: kvm: cannot allocate memory for VM %d", vm.VMID)
		default:
			vm.Status = "running"
		}
		reply(w, s.task(vm.Node, "qmstart", vm.VMID, exit))
	case "POST /status/stop":
		if vm.Booted {
			_ = s.fleet.Halt(vm.IPv4)
			vm.Booted = false
		}
		vm.Status = "stopped"
		reply(w, s.task(vm.Node, "qmstop", vm.VMID, "OK"))
	case "POST /agent/ping", "GET /agent/network-get-interfaces", "POST /agent/exec":
		if !s.agentUp(w, vm) {
			return
		}
		switch route {
		case "POST /agent/ping":
			reply(w, map[string]any{"result": map[string]any{}})
		case "GET /agent/network-get-interfaces":
			reply(w, map[string]any{"result": []map[string]any{
				{"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": []map[string]any{{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}}},
				{"name": "eth0", "hardware-address": "bc:24:11:00:00:01", "ip-addresses": []map[string]any{
					{"ip-address": "fe80::be24:11ff:fe00:1", "ip-address-type": "ipv6", "prefix": 64},
					{"ip-address": vm.IPv4, "ip-address-type": "ipv4", "prefix": 24}}},
			}})
		default:
			s.exec(w, vm, p)
		}
	case "DELETE ":
		if !check(w, p, "purge", "destroy-unreferenced-disks", "skiplock") {
			return
		}
		if vm.Status == "running" {
			fail(w, http.StatusInternalServerError, fmt.Sprintf("VM %d is running - destroy failed", vm.VMID), nil)
			return
		}
		if vm.Template {
			fail(w, http.StatusInternalServerError, "the fake keeps its templates", nil)
			return
		}
		delete(s.vms, vm.VMID)
		reply(w, s.task(vm.Node, "qmdestroy", vm.VMID, "OK"))
	default:
		fail(w, http.StatusNotImplemented, "Method '"+route+"' not implemented", nil)
	}
}

// configure applies config parameters, or returns the parameter errors.
func (s *Server) configure(vm *VM, p map[string]any) map[string]string {
	errs := map[string]string{}
	next := *vm
	if v, ok := p["cores"]; ok {
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil || n < 1 {
			errs["cores"] = "value must be at least 1"
		}
		next.Cores = n
	}
	if v, ok := p["memory"]; ok {
		n, err := strconv.Atoi(fmt.Sprint(v))
		if err != nil || n < 16 {
			errs["memory"] = "value must be at least 16"
		}
		next.MemoryMiB = n
	}
	if v, ok := p["tags"]; ok {
		tags := fmt.Sprint(v)
		for _, t := range strings.FieldsFunc(tags, func(r rune) bool { return r == ';' || r == ',' || r == ' ' }) {
			if !tagRE.MatchString(t) {
				errs["tags"] = "invalid format - invalid characters in tag '" + t + "'"
			}
		}
		next.Tags = tags
	}
	if v, ok := p["sshkeys"]; ok {
		keys, err := url.PathUnescape(fmt.Sprint(v))
		if err != nil || strings.ContainsAny(fmt.Sprint(v), " \n") {
			errs["sshkeys"] = "invalid urlencoded string"
		}
		next.SSHKeys = keys
	}
	if v, ok := p["ipconfig0"]; ok {
		next.IPConfig0 = fmt.Sprint(v)
	}
	if v, ok := p["agent"]; ok {
		a := strings.SplitN(fmt.Sprint(v), ",", 2)[0]
		next.Agent = a == "1" || a == "enabled=1"
	}
	if v, ok := p["name"]; ok {
		next.Name = fmt.Sprint(v)
	}
	if len(errs) > 0 {
		return errs
	}
	*vm = next
	return nil
}

// agentUp answers for a guest agent that is not there.
func (s *Server) agentUp(w http.ResponseWriter, vm *VM) bool {
	switch {
	case vm.Status != "running":
		fail(w, http.StatusInternalServerError, fmt.Sprintf("VM %d is not running", vm.VMID), nil)
	case !vm.Agent:
		fail(w, http.StatusInternalServerError, "No QEMU guest agent configured", nil)
	default:
		return true
	}
	return false
}

// exec runs a command through the guest agent: /bin/sh (with or without
// arguments, which the fake does not run) with input-data boots the VM's
// box with that script, as a shell reading it from its standard input.
func (s *Server) exec(w http.ResponseWriter, vm *VM, p map[string]any) {
	if !check(w, p, "command", "input-data") {
		return
	}
	var cmd []string
	switch c := p["command"].(type) {
	case []string:
		cmd = c
	case string:
		cmd = []string{c}
	}
	input := str(p, "input-data")
	if len(cmd) == 0 || len(input) > 65536 {
		fail(w, http.StatusBadRequest, "Parameter verification failed.", map[string]string{"command": "property is missing or input-data is too long"})
		return
	}
	s.pid++
	pid := s.pid
	if cmd[0] == "/bin/sh" && input != "" && !s.noBoot {
		if err := s.fleet.Boot(vm.IPv4, input); err != nil {
			fail(w, http.StatusInternalServerError, "guest agent: "+err.Error(), nil)
			return
		}
		vm.Booted = true
	}
	reply(w, map[string]any{"pid": pid})
}
