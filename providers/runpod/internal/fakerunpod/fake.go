// Package fakerunpod is a fake of RunPod's REST API for tests, written
// from RunPod's published OpenAPI description: repository
// github.com/runpod/docs, path api-reference/openapi.json, commit
// a900806e253c4f8c16da27d1a4370e72456da4cb (servers: https://rest.runpod.io/v1;
// security: a Bearer API key). It serves the pod operations of that
// description with its paths, status codes and schemas:
//
//   - POST /pods (CreatePod): a PodCreateInput, checked against the
//     schema (unknown fields, the enums of cloudType, computeType,
//     gpuTypeIds and gpuTypePriority, gpuCount >= 1, name at most 191
//     characters, ports as "[port]/[http|tcp]"); 201 with the Pod, 400
//     on invalid input;
//   - GET /pods (ListPods, a plain array: the description has no paging)
//     with its name, id and desiredStatus filters; GET /pods/{podId}
//     (GetPod), 404 for an unknown pod;
//   - POST /pods/{podId}/stop (StopPod), 200;
//   - DELETE /pods/{podId} (DeletePod), 204, and 400 for an unknown pod
//     (the description lists 204, 400 and 401 only).
//
// A request without the API key is answered 401 with the description's
// UnauthorizedError body ({"message": ...}); other errors carry
// {"error": ..., "status": ...}, as RunPod's API answers. A create for
// which the fake has no GPU (SetFull) is answered 500 "There are no
// instances currently available", as RunPod does (the description does
// not list it; crabbox's upstream documents it).
//
// A created pod is RUNNING. Like a real pod it has no publicIp and no
// portMappings while it initialises (in the create's answer); then it is
// a real SSH box from cloudtest: the fake boots the bootstrap crabbox
// passes in the pod's CRABBOX_BOOTSTRAP environment variable (base64 of
// the user data; the only crabbox-specific part of the fake, as a cloud
// fake reads user data) and reports publicIp 127.0.0.1 with the box's
// port as the mapping of 22. Stop and delete halt the box.
//
// Faults (Fail, Lose, Hang) make one operation fail, succeed with its
// answer lost, or hang, to test retries and rollbacks.
package fakerunpod

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// Operations, for faults and events.
const (
	OpCreate = "create"
	OpList   = "list"
	OpGet    = "get"
	OpStop   = "stop"
	OpDelete = "delete"
)

// BootstrapEnv is the pod environment variable whose value (base64) the
// fake boots as the box's user data.
const BootstrapEnv = "CRABBOX_BOOTSTRAP"

// gpuTypes is the enum of PodCreateInput.gpuTypeIds.
var gpuTypes = []string{
	"NVIDIA GeForce RTX 4090",
	"NVIDIA A40",
	"NVIDIA RTX A5000",
	"NVIDIA GeForce RTX 5090",
	"NVIDIA H100 80GB HBM3",
	"NVIDIA GeForce RTX 3090",
	"NVIDIA RTX A4500",
	"NVIDIA L40S",
	"NVIDIA H200",
	"NVIDIA L4",
	"NVIDIA RTX 6000 Ada Generation",
	"NVIDIA A100-SXM4-80GB",
	"NVIDIA RTX 4000 Ada Generation",
	"NVIDIA RTX A6000",
	"NVIDIA A100 80GB PCIe",
	"NVIDIA RTX 2000 Ada Generation",
	"NVIDIA RTX A4000",
	"NVIDIA RTX PRO 6000 Blackwell Server Edition",
	"NVIDIA H100 PCIe",
	"NVIDIA H100 NVL",
	"NVIDIA L40",
	"NVIDIA B200",
	"NVIDIA GeForce RTX 3080 Ti",
	"NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
	"NVIDIA GeForce RTX 3080",
	"NVIDIA GeForce RTX 3070",
	"AMD Instinct MI300X OAM",
	"NVIDIA GeForce RTX 4080 SUPER",
	"Tesla V100-PCIE-16GB",
	"Tesla V100-SXM2-32GB",
	"NVIDIA RTX 5000 Ada Generation",
	"NVIDIA GeForce RTX 4070 Ti",
	"NVIDIA RTX 4000 SFF Ada Generation",
	"NVIDIA GeForce RTX 3090 Ti",
	"NVIDIA RTX A2000",
	"NVIDIA GeForce RTX 4080",
	"NVIDIA A30",
	"NVIDIA GeForce RTX 5080",
	"Tesla V100-FHHL-16GB",
	"NVIDIA H200 NVL",
	"Tesla V100-SXM2-16GB",
	"NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
	"NVIDIA A5000 Ada",
	"Tesla V100-PCIE-32GB",
	"NVIDIA  RTX A4500",
	"NVIDIA  A30",
	"NVIDIA GeForce RTX 3080TI",
	"Tesla T4",
	"NVIDIA RTX A30",
}

// Price is the fake's securePrice of every GPU type, per GPU and hour.
const Price = 0.44

// Pod is a pod of the fake, as its API shows it.
type Pod struct {
	ID                string            `json:"id"`
	Name              string            `json:"name"`
	DesiredStatus     string            `json:"desiredStatus"`
	Image             string            `json:"image"`
	PublicIP          *string           `json:"publicIp"`
	PortMappings      map[string]int    `json:"portMappings"`
	Ports             []string          `json:"ports"`
	Env               map[string]string `json:"env"`
	CostPerHr         float64           `json:"costPerHr"`
	AdjustedCostPerHr float64           `json:"adjustedCostPerHr"`
	GPU               *GPU              `json:"gpu,omitempty"`
	ContainerDiskInGb int               `json:"containerDiskInGb"`
	VolumeInGb        int               `json:"volumeInGb"`
	Interruptible     bool              `json:"interruptible"`
	MachineID         string            `json:"machineId"`
	DockerEntrypoint  []string          `json:"dockerEntrypoint"`
	DockerStartCmd    []string          `json:"dockerStartCmd"`

	addr   string // the fleet address of its box, "" before it booted
	reads  int
	booted bool
}

// GPU is a pod's gpu object.
type GPU struct {
	ID             string  `json:"id"`
	Count          int     `json:"count"`
	DisplayName    string  `json:"displayName"`
	SecurePrice    float64 `json:"securePrice"`
	CommunityPrice float64 `json:"communityPrice"`
}

// createInput is PodCreateInput.
type createInput struct {
	AllowedCudaVersions     []string          `json:"allowedCudaVersions"`
	CloudType               *string           `json:"cloudType"`
	ComputeType             *string           `json:"computeType"`
	ContainerDiskInGb       *int              `json:"containerDiskInGb"`
	ContainerRegistryAuthID string            `json:"containerRegistryAuthId"`
	CountryCodes            []string          `json:"countryCodes"`
	CPUFlavorIDs            []string          `json:"cpuFlavorIds"`
	CPUFlavorPriority       string            `json:"cpuFlavorPriority"`
	DataCenterIDs           []string          `json:"dataCenterIds"`
	DataCenterPriority      string            `json:"dataCenterPriority"`
	DockerEntrypoint        []string          `json:"dockerEntrypoint"`
	DockerStartCmd          []string          `json:"dockerStartCmd"`
	Env                     map[string]string `json:"env"`
	GlobalNetworking        bool              `json:"globalNetworking"`
	GPUCount                *int              `json:"gpuCount"`
	GPUTypeIDs              []string          `json:"gpuTypeIds"`
	GPUTypePriority         *string           `json:"gpuTypePriority"`
	ImageName               string            `json:"imageName"`
	Interruptible           bool              `json:"interruptible"`
	Locked                  bool              `json:"locked"`
	MinDiskBandwidthMBps    float64           `json:"minDiskBandwidthMBps"`
	MinDownloadMbps         float64           `json:"minDownloadMbps"`
	MinRAMPerGPU            int               `json:"minRAMPerGPU"`
	MinUploadMbps           float64           `json:"minUploadMbps"`
	MinVCPUPerGPU           int               `json:"minVCPUPerGPU"`
	Name                    *string           `json:"name"`
	NetworkVolumeID         string            `json:"networkVolumeId"`
	Ports                   []string          `json:"ports"`
	SupportPublicIP         *bool             `json:"supportPublicIp"`
	TemplateID              string            `json:"templateId"`
	VCPUCount               int               `json:"vcpuCount"`
	VolumeInGb              *int              `json:"volumeInGb"`
	VolumeEncrypted         bool              `json:"volumeEncrypted"`
	VolumeMountPath         string            `json:"volumeMountPath"`
}

type fault struct {
	status     int    // answer this status instead of doing the operation
	retryAfter string // with this Retry-After
	lose       bool   // do it, then answer 500
	hang       func() // call it, then block until the request ends (before doing it)
	hangAfter  func() // do it, call it, then block
}

// Server is the fake API. It is safe for concurrent use.
type Server struct {
	fleet *cloudtest.Fleet
	key   string

	mu      sync.Mutex
	pods    map[string]*Pod
	order   []string
	next    int
	events  []string
	faults  map[string][]fault
	full    map[string]bool
	noBoot  bool
	counts  map[string]int
	creates []createInput
}

// New returns a fake API accepting the API key key, booting its pods'
// boxes in fleet.
func New(fleet *cloudtest.Fleet, key string) *Server {
	return &Server{fleet: fleet, key: key, pods: map[string]*Pod{}, faults: map[string][]fault{}, full: map[string]bool{}, counts: map[string]int{}}
}

func (s *Server) addFault(op string, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[op] = append(s.faults[op], f)
}

// Fail makes the next n requests of op answer status (with Retry-After
// retryAfter when not empty) without doing anything.
func (s *Server) Fail(op string, status, n int, retryAfter string) {
	for range n {
		s.addFault(op, fault{status: status, retryAfter: retryAfter})
	}
}

// Lose makes the next request of op succeed but answer 500.
func (s *Server) Lose(op string) { s.addFault(op, fault{lose: true}) }

// Hang makes the next request of op call hung and block until the
// client gives up; after says whether it does the operation first.
func (s *Server) Hang(op string, after bool, hung func()) {
	if after {
		s.addFault(op, fault{hangAfter: hung})
	} else {
		s.addFault(op, fault{hang: hung})
	}
}

// SetFull makes creates of the GPU type gpu fail for lack of machines.
func (s *Server) SetFull(gpu string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full[gpu] = true
}

// SetNoBoot makes new pods' boxes never answer SSH: they get an address
// and a port where nothing listens.
func (s *Server) SetNoBoot() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noBoot = true
}

// Events are the mutations done, in order: "create <gpu type>", "stop",
// "delete".
func (s *Server) Events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Requests is how many requests of op the fake answered.
func (s *Server) Requests(op string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[op]
}

// Pods are copies of the pods, in creation order.
func (s *Server) Pods() []Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Pod
	for _, id := range s.order {
		if p := s.pods[id]; p != nil {
			out = append(out, s.view(p))
		}
	}
	return out
}

// Creates are the create requests' GPU types, counts, cloud types,
// images and container disks, in order, as "type x count cloud image diskGB".
func (s *Server) Creates() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.creates {
		out = append(out, fmt.Sprintf("%s x%d %s %s %dGB", strings.Join(c.GPUTypeIDs, "|"), deref(c.GPUCount, 1), deref(c.CloudType, "SECURE"), c.ImageName, deref(c.ContainerDiskInGb, 50)))
	}
	return out
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

var (
	podPath  = regexp.MustCompile(`^/pods/([^/]+)(/stop)?$`)
	portSpec = regexp.MustCompile(`^[0-9]{1,5}/(http|tcp)$`)
)

func op(r *http.Request) (string, string) {
	if r.URL.Path == "/pods" {
		switch r.Method {
		case http.MethodPost:
			return OpCreate, ""
		case http.MethodGet:
			return OpList, ""
		}
		return "", ""
	}
	m := podPath.FindStringSubmatch(r.URL.Path)
	switch {
	case m == nil:
		return "", ""
	case m[2] == "/stop" && r.Method == http.MethodPost:
		return OpStop, m[1]
	case m[2] == "" && r.Method == http.MethodGet:
		return OpGet, m[1]
	case m[2] == "" && r.Method == http.MethodDelete:
		return OpDelete, m[1]
	}
	return "", ""
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"error": msg, "status": status})
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.key {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Unauthorized"})
		return
	}
	name, id := op(r)
	if name == "" {
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
		return
	}
	s.mu.Lock()
	s.counts[name]++
	var f fault
	if q := s.faults[name]; len(q) > 0 {
		f, s.faults[name] = q[0], q[1:]
	}
	s.mu.Unlock()
	switch {
	case f.status != 0:
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		writeError(w, f.status, "fake "+http.StatusText(f.status))
		return
	case f.hang != nil:
		// Read the body first: only then does the server notice that the
		// client gave up (and end r's context).
		_, _ = io.Copy(io.Discard, r.Body)
		f.hang()
		<-r.Context().Done()
		return
	}
	var status int
	var body any
	switch name {
	case OpCreate:
		status, body = s.create(r)
	case OpList:
		status, body = s.list(r)
	case OpGet:
		status, body = s.get(id)
	case OpStop:
		status, body = s.stop(id)
	case OpDelete:
		status, body = s.delete(id)
	}
	switch {
	case f.lose:
		writeError(w, http.StatusInternalServerError, "fake lost answer")
	case f.hangAfter != nil:
		f.hangAfter()
		<-r.Context().Done()
	case status == http.StatusNoContent:
		w.WriteHeader(status)
	case status >= 400:
		writeError(w, status, body.(string))
	default:
		writeJSON(w, status, body)
	}
}

func (s *Server) create(r *http.Request) (int, any) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return http.StatusBadRequest, "invalid input: " + err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var in createInput
	if err := dec.Decode(&in); err != nil {
		return http.StatusBadRequest, "invalid input: " + err.Error()
	}
	if msg := check(in); msg != "" {
		return http.StatusBadRequest, "invalid input: " + msg
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.creates = append(s.creates, in)
	count := deref(in.GPUCount, 1)
	gpu := ""
	for _, t := range in.GPUTypeIDs {
		if !s.full[t] {
			gpu = t
			break
		}
	}
	if len(in.GPUTypeIDs) == 0 {
		gpu = gpuTypes[0]
	}
	if gpu == "" {
		return http.StatusInternalServerError, "create pod: There are no instances currently available"
	}
	s.next++
	p := &Pod{
		ID: fmt.Sprintf("fakepod%07d", s.next), Name: deref(in.Name, "my pod"), DesiredStatus: "RUNNING",
		Image: in.ImageName, Ports: in.Ports, Env: in.Env, ContainerDiskInGb: deref(in.ContainerDiskInGb, 50),
		VolumeInGb: deref(in.VolumeInGb, 20), Interruptible: in.Interruptible, MachineID: "fakemachine",
		GPU:              &GPU{ID: gpu, Count: count, DisplayName: gpu, SecurePrice: Price, CommunityPrice: Price / 2},
		DockerEntrypoint: in.DockerEntrypoint, DockerStartCmd: in.DockerStartCmd,
	}
	price := Price
	if deref(in.CloudType, "SECURE") == "COMMUNITY" {
		price = Price / 2
	}
	p.CostPerHr = price * float64(count)
	p.AdjustedCostPerHr = p.CostPerHr
	if p.Env == nil {
		p.Env = map[string]string{}
	}
	s.pods[p.ID] = p
	s.order = append(s.order, p.ID)
	s.events = append(s.events, OpCreate+" "+gpu)
	return http.StatusCreated, s.view(p)
}

// check checks a create's input against the schema's constraints.
func check(in createInput) string {
	oneOf := func(field string, v *string, allowed ...string) string {
		if v != nil && !slices.Contains(allowed, *v) {
			return fmt.Sprintf("%s %q is not one of %v", field, *v, allowed)
		}
		return ""
	}
	for _, msg := range []string{
		oneOf("cloudType", in.CloudType, "SECURE", "COMMUNITY"),
		oneOf("computeType", in.ComputeType, "GPU", "CPU"),
		oneOf("gpuTypePriority", in.GPUTypePriority, "availability", "custom"),
	} {
		if msg != "" {
			return msg
		}
	}
	for _, t := range in.GPUTypeIDs {
		if !slices.Contains(gpuTypes, t) {
			return fmt.Sprintf("gpuTypeIds: %q is not a GPU type", t)
		}
	}
	switch {
	case in.GPUCount != nil && *in.GPUCount < 1:
		return "gpuCount must be at least 1"
	case in.Name != nil && len(*in.Name) > 191:
		return "name is longer than 191 characters"
	case in.ImageName == "" && in.TemplateID == "":
		return "imageName or templateId is required"
	case in.ContainerDiskInGb != nil && *in.ContainerDiskInGb < 0, in.VolumeInGb != nil && *in.VolumeInGb < 0:
		return "disk sizes must not be negative"
	}
	for _, p := range in.Ports {
		if !portSpec.MatchString(p) {
			return fmt.Sprintf("port %q is not [port number]/[http|tcp]", p)
		}
	}
	return ""
}

// view is a copy of the pod as the API shows it.
func (s *Server) view(p *Pod) Pod {
	v := *p
	v.Env, v.PortMappings = clone(p.Env), clone(p.PortMappings)
	return v
}

func clone[V any](m map[string]V) map[string]V {
	if m == nil {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// readLocked counts a read of p and boots its box at the first (the
// create's answer shows it initialising).
func (s *Server) readLocked(p *Pod) {
	p.reads++
	if p.booted || p.DesiredStatus != "RUNNING" {
		return
	}
	p.booted = true
	ip := "127.0.0.1"
	port := closedPort()
	if ud, err := base64.StdEncoding.DecodeString(p.Env[BootstrapEnv]); err == nil && len(ud) > 0 && !s.noBoot {
		p.addr = s.fleet.NewAddress()
		if err := s.fleet.Boot(p.addr, string(ud)); err == nil {
			if b := s.fleet.Box(p.addr); b != nil {
				ip, port = b.Host, b.Port
			}
		}
	}
	p.PublicIP, p.PortMappings = &ip, map[string]int{"22": port}
}

// closedPort is a loopback port where nothing listens.
func closedPort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 1
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (s *Server) list(r *http.Request) (int, any) {
	q := r.URL.Query()
	if st := q.Get("desiredStatus"); st != "" && !slices.Contains([]string{"RUNNING", "EXITED", "TERMINATED"}, st) {
		return http.StatusBadRequest, "invalid desiredStatus"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []Pod{}
	for _, id := range s.order {
		p := s.pods[id]
		if p == nil || (q.Has("name") && p.Name != q.Get("name")) || (q.Has("id") && p.ID != q.Get("id")) ||
			(q.Has("desiredStatus") && p.DesiredStatus != q.Get("desiredStatus")) {
			continue
		}
		s.readLocked(p)
		out = append(out, s.view(p))
	}
	return http.StatusOK, out
}

func (s *Server) get(id string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[id]
	if p == nil {
		return http.StatusNotFound, "pod not found"
	}
	s.readLocked(p)
	return http.StatusOK, s.view(p)
}

func (s *Server) stop(id string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[id]
	if p == nil {
		return http.StatusBadRequest, "invalid pod id"
	}
	p.DesiredStatus, p.PublicIP, p.PortMappings = "EXITED", nil, nil
	s.halt(p)
	s.events = append(s.events, OpStop)
	return http.StatusOK, s.view(p)
}

func (s *Server) delete(id string) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods[id]
	if p == nil {
		return http.StatusBadRequest, "invalid pod id"
	}
	delete(s.pods, id)
	s.halt(p)
	s.events = append(s.events, OpDelete)
	return http.StatusNoContent, nil
}

func (s *Server) halt(p *Pod) {
	if p.addr != "" {
		_ = s.fleet.Halt(p.addr)
		p.addr = ""
	}
}
