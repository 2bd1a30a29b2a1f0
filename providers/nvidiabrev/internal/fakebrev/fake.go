// Package fakebrev is an NVIDIA Brev control-plane API server for tests:
// the part of the API a lease uses.
//
// Brev publishes no OpenAPI or reference description of this API. The
// fake is written from the service's own published client, the Brev CLI
// (github.com/brevdev/brev-cli at commit
// 12d39b75fbbbad5bed5e4a748e0df447f9864d0b): the paths and methods of
// pkg/store/workspace.go and pkg/store/instancetypes.go, the JSON shapes
// of pkg/entity/entity.go (Workspace), pkg/store/workspace.go
// (CreateWorkspacesOptions, ModifyWorkspaceRequest) and
// pkg/cmd/gpusearch/gpusearch.go (AllInstanceTypesResponse), the error
// body of pkg/store/http.go (BrevDeployErrorList: {"errors":[{"type",
// "message"}]}), the bearer authentication of pkg/store/http.go (an API
// key "bak-..." as the token, pkg/auth/auth.go), the name rule of
// pkg/names/validate.go (at most 63 of [a-zA-Z0-9._-], starting with a
// letter or digit), the workspace statuses of entity.go, and the reading
// of capacity in pkg/cmd/gpucreate/gpucreate.go (an instance type listed
// with no workspace group has no capacity).
//
// Served:
//
//	GET    /api/organizations/{org}/workspaces          one array, no pages
//	POST   /api/organizations/{org}/workspaces          CreateWorkspacesOptions
//	GET    /api/workspaces/{id}
//	PUT    /api/workspaces/{id}                         ModifyWorkspaceRequest (name)
//	DELETE /api/workspaces/{id}
//	GET    /api/instances/alltypesavailable/{org}
//
// One thing is inferred rather than read from the client: the CLI sends
// labels with a create "for tracking and UI rendering" (gpucreate.go)
// but declares no labels field on the Workspace it reads, so the fake
// returns the create's labels as the workspace's "labels" member, as the
// console that renders them must receive them (the provider's live test
// checks this against Brev).
//
// A workspace's box is a cloudtest box booted from its lifecycle script
// (vmBuild.lifeCycleScriptAttr.script) at the address the workspace's
// dns field reports. A new workspace reports DEPLOYING in the create's
// answer and RUNNING from its first read on. What the client does not
// show (statuses of errors other than "an error") is chosen plainly: 401
// without a valid key, 403 for another organization, 404 for a missing
// workspace, 400 for a bad body or name; a create in a workspace group
// that does not offer the type is refused with 400.
package fakebrev

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

// InstanceType is one type of the listing, with the workspace groups
// that offer it.
type InstanceType struct {
	Type     string
	GPU      string
	GPUCount int
	// Price is the hourly base price in USD ("1.29"); "" for none.
	Price  string
	Groups []string
}

// Create is one create request as the fake received it.
type Create struct {
	Name, WorkspaceGroupID, InstanceType, DiskStorage string
	VMOnlyMode                                        bool
	Labels                                            map[string]string
	FirewallPorts                                     []string
	Script                                            string
}

// Server is the fake API. Machines live in a tagcloudtest.FakeCloud: a
// machine's only tag is its workspace name.
type Server struct {
	cloud *tagcloudtest.FakeCloud
	key   string
	org   string

	mu      sync.Mutex
	types   []InstanceType
	full    map[string]bool // "type/group" without capacity
	creates []Create
	lists   int
	extra   []workspace // workspaces not made through the API (other users')
	labels  map[int]map[string]string
	events  []string
}

// Events returns the mutations done, in order: "create NAME",
// "rename ID NAME", "delete ID".
func (s *Server) Events() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

func (s *Server) event(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, fmt.Sprintf(format, args...))
}

// New returns a fake for the organization org accepting the API key key,
// with its machines in cloud.
func New(cloud *tagcloudtest.FakeCloud, key, org string, types ...InstanceType) *Server {
	return &Server{cloud: cloud, key: key, org: org, types: types, full: map[string]bool{}, labels: map[int]map[string]string{}}
}

// SetFull removes workspace group group from type's listing, as Brev
// lists a type without capacity there.
func (s *Server) SetFull(typ, group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.full[typ+"/"+group] = true
	s.cloud.SetFull(typ, group)
}

// Creates returns the create requests received, in order.
func (s *Server) Creates() []Create {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.creates)
}

// Lists returns how many workspace lists were served.
func (s *Server) Lists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

// AddForeign adds a workspace that was not made through the fake's
// create (another user's, or a manual one), with no box.
func (s *Server) AddForeign(id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.extra = append(s.extra, workspace{ID: id, Name: name, OrganizationID: s.org, Status: "RUNNING", DNS: "192.0.2.250"})
}

// Foreign returns the names of the foreign workspaces still there.
func (s *Server) Foreign() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, w := range s.extra {
		out = append(out, w.Name)
	}
	return out
}

type workspace struct {
	ID               string            `json:"id"`
	Name             string            `json:"name"`
	WorkspaceGroupID string            `json:"workspaceGroupId"`
	OrganizationID   string            `json:"organizationId"`
	WorkspaceClassID string            `json:"workspaceClassId"`
	InstanceType     string            `json:"instanceType,omitempty"`
	CreatedByUserID  string            `json:"createdByUserId"`
	DNS              string            `json:"dns"`
	Status           string            `json:"status"`
	StatusMessage    string            `json:"statusMessage"`
	SSHPort          int               `json:"sshPort"`
	SSHUser          string            `json:"sshUser"`
	HealthStatus     string            `json:"healthStatus"`
	IsStoppable      bool              `json:"isStoppable"`
	Labels           map[string]string `json:"labels,omitempty"`
}

type createBody struct {
	Name             string `json:"name"`
	WorkspaceGroupID string `json:"workspaceGroupId"`
	InstanceType     string `json:"instanceType"`
	DiskStorage      string `json:"diskStorage"`
	VMOnlyMode       bool   `json:"vmOnlyMode"`
	VMBuild          *struct {
		LifeCycleScriptAttr *struct {
			Script string `json:"script"`
		} `json:"lifeCycleScriptAttr"`
	} `json:"vmBuild"`
	FirewallRules []struct {
		Port       string `json:"port"`
		AllowedIPs string `json:"allowedIPs"`
	} `json:"firewallRules"`
	Labels map[string]string `json:"labels"`
}

var (
	orgRoute   = regexp.MustCompile(`^/api/organizations/([^/]+)/workspaces$`)
	wsRoute    = regexp.MustCompile(`^/api/workspaces/([^/]+)$`)
	typesRoute = regexp.MustCompile(`^/api/instances/alltypesavailable/([^/]+)$`)
	validName  = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`)
)

// ErrorBody is Brev's error body with message.
func ErrorBody(message string) string {
	b, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"type": "error", "message": message}}})
	return string(b)
}

// Op classifies a request as a tagcloudtest operation, for faults.
func Op(r *http.Request) string {
	switch {
	case orgRoute.MatchString(r.URL.Path) && r.Method == http.MethodPost:
		return tagcloudtest.OpCreate
	case orgRoute.MatchString(r.URL.Path) && r.Method == http.MethodGet:
		return tagcloudtest.OpList
	case wsRoute.MatchString(r.URL.Path) && r.Method == http.MethodGet:
		return tagcloudtest.OpGet
	case wsRoute.MatchString(r.URL.Path) && r.Method == http.MethodPut:
		return tagcloudtest.OpTag
	case wsRoute.MatchString(r.URL.Path) && r.Method == http.MethodDelete:
		return tagcloudtest.OpDelete
	}
	return ""
}

func fail(w http.ResponseWriter, status int, msg string) {
	tagcloudtest.Reply(w, status, ErrorBody(msg))
}

func reply(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	tagcloudtest.Reply(w, http.StatusOK, string(b))
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.key {
		fail(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	if m := orgRoute.FindStringSubmatch(r.URL.Path); m != nil {
		if m[1] != s.org {
			fail(w, http.StatusForbidden, "forbidden: not a member of organization "+m[1])
			return
		}
		switch r.Method {
		case http.MethodGet:
			s.list(w)
		case http.MethodPost:
			s.create(w, r)
		default:
			fail(w, http.StatusMethodNotAllowed, "method not allowed")
		}
		return
	}
	if m := typesRoute.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodGet {
		if m[1] != s.org {
			fail(w, http.StatusForbidden, "forbidden: not a member of organization "+m[1])
			return
		}
		s.listTypes(w)
		return
	}
	if m := wsRoute.FindStringSubmatch(r.URL.Path); m != nil {
		switch r.Method {
		case http.MethodGet:
			s.get(w, m[1])
		case http.MethodPut:
			s.modify(w, r, m[1])
		case http.MethodDelete:
			s.delete(w, m[1])
		default:
			fail(w, http.StatusMethodNotAllowed, "method not allowed")
		}
		return
	}
	fail(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
}

func (s *Server) workspace(m tagcloudtest.FakeMachine) workspace {
	status := "RUNNING"
	if m.Reads == 0 {
		status = "DEPLOYING"
	}
	name := m.Name
	if len(m.Tags) > 0 {
		name = m.Tags[0]
	}
	s.mu.Lock()
	labels := maps.Clone(s.labels[m.ID])
	s.mu.Unlock()
	return workspace{
		Labels: labels,
		ID:     strconv.Itoa(m.ID), Name: name, WorkspaceGroupID: m.Region, OrganizationID: s.org,
		InstanceType: m.Size, CreatedByUserID: "user-fake", DNS: m.IPv4, Status: status,
		SSHPort: 22, SSHUser: "ubuntu", HealthStatus: "HEALTHY",
	}
}

func (s *Server) list(w http.ResponseWriter) {
	s.mu.Lock()
	s.lists++
	out := slices.Clone(s.extra)
	s.mu.Unlock()
	for _, m := range s.cloud.List("") {
		out = append(out, s.workspace(m))
	}
	if out == nil {
		out = []workspace{}
	}
	reply(w, out)
}

func (s *Server) listTypes(w http.ResponseWriter) {
	type gpu struct {
		Count        int    `json:"count"`
		Name         string `json:"name"`
		Manufacturer string `json:"manufacturer"`
	}
	type group struct {
		ID           string `json:"id"`
		Name         string `json:"name"`
		PlatformType string `json:"platformType"`
	}
	type price struct {
		Currency string `json:"currency"`
		Amount   string `json:"amount"`
	}
	type typ struct {
		Type            string  `json:"type"`
		SupportedGPUs   []gpu   `json:"supported_gpus"`
		VCPU            int     `json:"vcpu"`
		Memory          string  `json:"memory"`
		BasePrice       price   `json:"base_price"`
		Provider        string  `json:"provider"`
		WorkspaceGroups []group `json:"workspace_groups"`
	}
	s.mu.Lock()
	var out []typ
	for _, t := range s.types {
		o := typ{Type: t.Type, VCPU: 8, Memory: "64GiB", Provider: "fakecloud", BasePrice: price{Currency: "USD", Amount: t.Price},
			SupportedGPUs: []gpu{}, WorkspaceGroups: []group{}}
		if t.GPU != "" {
			o.SupportedGPUs = append(o.SupportedGPUs, gpu{Count: t.GPUCount, Name: t.GPU, Manufacturer: "NVIDIA"})
		}
		for _, g := range t.Groups {
			if !s.full[t.Type+"/"+g] {
				o.WorkspaceGroups = append(o.WorkspaceGroups, group{ID: g, Name: g, PlatformType: "fake"})
			}
		}
		out = append(out, o)
	}
	s.mu.Unlock()
	reply(w, map[string]any{"allInstanceTypes": out})
}

func (s *Server) offered(typ, group string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.types {
		if t.Type == typ {
			return slices.Contains(t.Groups, group)
		}
	}
	return false
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var in createBody
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
		fail(w, http.StatusBadRequest, "bad body: "+err.Error())
		return
	}
	if len(in.Name) > 63 || !validName.MatchString(in.Name) {
		fail(w, http.StatusBadRequest, fmt.Sprintf("invalid name %q", in.Name))
		return
	}
	if !s.offered(in.InstanceType, in.WorkspaceGroupID) {
		fail(w, http.StatusBadRequest, fmt.Sprintf("instance type %q is not offered in workspace group %q", in.InstanceType, in.WorkspaceGroupID))
		return
	}
	script := ""
	if in.VMBuild != nil && in.VMBuild.LifeCycleScriptAttr != nil {
		script = in.VMBuild.LifeCycleScriptAttr.Script
	}
	c := Create{Name: in.Name, WorkspaceGroupID: in.WorkspaceGroupID, InstanceType: in.InstanceType,
		DiskStorage: in.DiskStorage, VMOnlyMode: in.VMOnlyMode, Labels: in.Labels, Script: script}
	for _, f := range in.FirewallRules {
		c.FirewallPorts = append(c.FirewallPorts, f.Port+"/"+f.AllowedIPs)
	}
	s.mu.Lock()
	s.creates = append(s.creates, c)
	s.mu.Unlock()
	m, ok, err := s.cloud.Create(tagcloudtest.FakeMachine{Name: in.Name, Size: in.InstanceType, Region: in.WorkspaceGroupID, Tags: []string{in.Name}, UserData: script})
	switch {
	case !ok:
		fail(w, http.StatusBadRequest, fmt.Sprintf("no capacity for %s in %s", in.InstanceType, in.WorkspaceGroupID))
		return
	case err != nil: // the test's fleet could not boot the box
		fail(w, http.StatusInternalServerError, "boot: "+err.Error())
		return
	}
	s.mu.Lock()
	s.labels[m.ID] = maps.Clone(in.Labels)
	s.mu.Unlock()
	s.event("create %s", in.Name)
	reply(w, s.workspace(m))
}

func (s *Server) id(w http.ResponseWriter, raw string) (int, bool) {
	id, err := strconv.Atoi(raw)
	if err != nil {
		fail(w, http.StatusNotFound, "workspace "+raw+" not found")
		return 0, false
	}
	return id, true
}

func (s *Server) get(w http.ResponseWriter, raw string) {
	s.mu.Lock()
	if i := slices.IndexFunc(s.extra, func(x workspace) bool { return x.ID == raw }); i >= 0 {
		x := s.extra[i]
		s.mu.Unlock()
		reply(w, x)
		return
	}
	s.mu.Unlock()
	id, ok := s.id(w, raw)
	if !ok {
		return
	}
	m, ok := s.cloud.Get(id)
	if !ok {
		fail(w, http.StatusNotFound, "workspace "+raw+" not found")
		return
	}
	reply(w, s.workspace(m))
}

func (s *Server) modify(w http.ResponseWriter, r *http.Request, raw string) {
	id, ok := s.id(w, raw)
	if !ok {
		return
	}
	var in struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil {
		fail(w, http.StatusBadRequest, "bad body: "+err.Error())
		return
	}
	if in.Name != "" && (len(in.Name) > 63 || !validName.MatchString(in.Name)) {
		fail(w, http.StatusBadRequest, fmt.Sprintf("invalid name %q", in.Name))
		return
	}
	m, ok := s.cloud.Update(id, func(tags []string) []string {
		if in.Name == "" {
			return tags
		}
		return []string{in.Name}
	})
	if !ok {
		fail(w, http.StatusNotFound, "workspace "+raw+" not found")
		return
	}
	if in.Name != "" {
		s.event("rename %s %s", raw, in.Name)
	}
	reply(w, s.workspace(m))
}

func (s *Server) delete(w http.ResponseWriter, raw string) {
	s.mu.Lock()
	if i := slices.IndexFunc(s.extra, func(x workspace) bool { return x.ID == raw }); i >= 0 {
		x := s.extra[i]
		s.extra = slices.Delete(s.extra, i, i+1)
		s.mu.Unlock()
		s.event("delete %s", raw)
		x.Status = "DELETING"
		reply(w, x)
		return
	}
	s.mu.Unlock()
	id, ok := s.id(w, raw)
	if !ok {
		return
	}
	m, ok := s.cloud.Get(id)
	if !ok || !s.cloud.Delete(id) {
		fail(w, http.StatusNotFound, "workspace "+raw+" not found")
		return
	}
	s.event("delete %s", raw)
	ws := s.workspace(m)
	ws.Status = "DELETING"
	reply(w, ws)
}

// Names returns the names of the workspaces made through the API.
func (s *Server) Names() []string {
	var out []string
	for _, m := range s.cloud.List("") {
		out = append(out, s.workspace(m).Name)
	}
	return out
}
