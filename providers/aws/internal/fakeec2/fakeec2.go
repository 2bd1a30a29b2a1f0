// Package fakeec2 is an in-memory Amazon EC2 endpoint for tests of the aws
// provider. It speaks the EC2 Query API (form-encoded POSTs with an Action,
// XML answers, XML errors) for exactly the actions the provider uses, so the
// real aws-sdk-go-v2 client can be pointed at it with BaseEndpoint.
//
// Each region (read from the request's SigV4 credential scope) has its own
// key pairs, security groups, a default VPC, Canonical and other images, and
// instances. Instances start "pending" without an address and become
// "running" with PublicIP on the next DescribeInstances; terminated
// instances stay visible, as in EC2. RunInstances honours ClientToken.
//
// Faults make an action fail with an EC2 error code or hang until the
// request's context ends, before or after the action took effect; every call
// is recorded so tests can check what was done and in which order.
package fakeec2

import (
	"context"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// CanonicalOwner is the AWS account that publishes Ubuntu images.
const CanonicalOwner = "099720109477"

// Seeded images of every region. The newest Canonical image per
// architecture is the one a "latest Ubuntu LTS" lookup must find; OtherNewest
// is newer but not Canonical's, and must never be picked.
const (
	UbuntuAMD64Old = "ami-0000000000000a001"
	UbuntuAMD64    = "ami-0000000000000a002"
	UbuntuARM64    = "ami-0000000000000b002"
	OtherNewest    = "ami-0000000000000c001"
)

// DefaultVPC is the ID of every region's default VPC.
const DefaultVPC = "vpc-0default"

// Call is one request the fake received.
type Call struct {
	Region string
	// AccessKey is the access key ID the call was signed with.
	AccessKey string
	Action    string
	Params    url.Values
}

// Subject is the main resource a call names (an instance, group or key).
func (c Call) Subject() string {
	for _, k := range []string{"InstanceId.1", "ResourceId.1", "GroupId", "KeyPairId", "KeyName", "GroupName", "ImageId", "SnapshotId", "InstanceId"} {
		if v := c.Params.Get(k); v != "" {
			return v
		}
	}
	return ""
}

// String is "Action subject".
func (c Call) String() string {
	if s := c.Subject(); s != "" {
		return c.Action + " " + s
	}
	return c.Action
}

// Fault makes calls of one action misbehave.
type Fault struct {
	Action string
	// Match, if set, limits the fault to calls it accepts.
	Match func(Call) bool
	// Code and Message form the EC2 error returned; Status defaults to 400.
	Code    string
	Message string
	Status  int
	// Hang blocks the call until the request's context ends (the client gave
	// up) or the server closes.
	Hang bool
	// OnHang is called when a hang starts.
	OnHang func()
	// After lets the action take effect first, then fails or hangs: the work
	// is done but the answer is lost.
	After bool
	// Times limits how often the fault fires; 0 means always.
	Times int
}

// Instance is the fake's view of an instance.
type Instance struct {
	ID           string
	Region       string
	ImageID      string
	InstanceType string
	KeyName      string
	Groups       []string
	State        string
	PublicIP     string // while it runs
	Address      string // the public IP it gets when it runs
	ClientToken  string
	Lifecycle    string // "spot" or ""
	Shutdown     string // InstanceInitiatedShutdownBehavior
	UserData     string // decoded
	VolumeID     string
	Tags         map[string]string
	LaunchTime   time.Time

	pendingLeft int // describes left before it runs
}

// KeyPair is the fake's view of a key pair.
type KeyPair struct {
	ID, Name, PublicKey, Region string
	Tags                        map[string]string
}

// SecurityGroup is the fake's view of a security group.
type SecurityGroup struct {
	ID, Name, Description, VPC, Region string
	Tags                               map[string]string
	Ingress                            []Rule
}

// Rule is one ingress rule.
type Rule struct {
	Protocol string
	From, To int
	CIDR     string
}

// Volume is an instance's root volume.
type Volume struct {
	ID, Instance, Region string
	SizeGB               int // as RunInstances' block device mapping asked
	Tags                 map[string]string
}

// Account is the account ID of the fake's caller: the owner of the
// images it makes ("self" in DescribeImages and DescribeSnapshots).
const Account = "000000000000"

// Image is a machine image: a seeded one, or one CreateImage made of an
// instance (owned by Account, with its tags and the snapshot of the
// instance's root volume).
type Image struct {
	ID, Name, Owner, Architecture, State string
	Created                              time.Time
	Instance                             string // the instance it was made of
	Tags                                 map[string]string
	Snapshots                            []string

	pendingLeft int // describes left before it is available
}

// Snapshot is an EBS snapshot CreateImage made.
type Snapshot struct {
	ID, Region, Volume string
	SizeGB             int
	Tags               map[string]string
	Created            time.Time
}

type region struct {
	keys      map[string]*KeyPair
	groups    map[string]*SecurityGroup
	instances map[string]*Instance
	volumes   map[string]*Volume
	images    []Image
	snapshots map[string]*Snapshot
	vpcs      []string // the first is the default
}

// Server is the fake endpoint. Create it with New or Start.
type Server struct {
	// PublicIP is the address instances get when they start running.
	PublicIP string

	mu      sync.Mutex
	regions map[string]*region
	calls   []Call
	faults  []*Fault
	fired   map[*Fault]int
	seq     int
	closed  chan struct{}
	once    sync.Once
	hooks   Hooks
	pending int // describes an instance stays pending
	now     func() time.Time
}

// New returns a fake with the seeded images and default VPC in every region.
func New() *Server {
	return &Server{
		PublicIP: "127.0.0.1",
		regions:  map[string]*region{},
		fired:    map[*Fault]int{},
		closed:   make(chan struct{}),
		now:      time.Now,
		pending:  1,
	}
}

// Start serves a new fake on loopback until the test ends and returns it
// with its URL.
func Start(t testing.TB) (*Server, string) {
	t.Helper()
	s := New()
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.Close(); ts.Close() })
	return s, ts.URL
}

// Close ends every hanging call.
func (s *Server) Close() { s.once.Do(func() { close(s.closed) }) }

// Inject adds faults.
func (s *Server) Inject(faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range faults {
		s.faults = append(s.faults, &faults[i])
	}
}

// Hooks connect instances to the boxes they stand for. They are called
// outside the fake's lock.
type Hooks struct {
	// Launch is called with every new instance and returns the public
	// address it gets when it runs (e.g. after booting a fake box from its
	// user data). An error fails the RunInstances call. Nil means PublicIP.
	Launch func(Instance) (publicIP string, err error)
	// Terminate is called with every instance that is terminated.
	Terminate func(Instance)
	// Image is called when CreateImage makes the image imageID of an
	// instance (e.g. to copy the files of its box). An error fails the
	// CreateImage call, which then leaves no image.
	Image func(in Instance, imageID string) error
	// BeforeCall is called with every call before the fake acts on it
	// (e.g. to change a resource as another client would meanwhile).
	BeforeCall func(Call)
}

// SetHooks sets the hooks.
func (s *Server) SetHooks(h Hooks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = h
}

// SetPendingDescribes sets how many DescribeInstances calls see a new
// instance still pending without an address (default 1).
func (s *Server) SetPendingDescribes(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pending = n
}

// Calls returns every call received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Instances returns the instances of region that are not terminated.
func (s *Server) Instances(regionName string) []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Instance
	for _, in := range s.region(regionName).instances {
		if in.State != "terminated" {
			out = append(out, cloneInstance(in))
		}
	}
	slices.SortFunc(out, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Instance returns one instance, terminated or not.
func (s *Server) Instance(regionName, id string) (Instance, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in, ok := s.region(regionName).instances[id]
	if !ok {
		return Instance{}, false
	}
	return cloneInstance(in), true
}

// KeyPairs returns the key pairs of region.
func (s *Server) KeyPairs(regionName string) []KeyPair {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []KeyPair
	for _, k := range s.region(regionName).keys {
		out = append(out, *k)
	}
	slices.SortFunc(out, func(a, b KeyPair) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// SecurityGroups returns the security groups of region.
func (s *Server) SecurityGroups(regionName string) []SecurityGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SecurityGroup
	for _, g := range s.region(regionName).groups {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b SecurityGroup) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Volumes returns the volumes of region.
func (s *Server) Volumes(regionName string) []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Volume
	for _, v := range s.region(regionName).volumes {
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b Volume) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Images returns the images of region that the fake's account owns
// (those CreateImage made), without the seeded ones.
func (s *Server) Images(regionName string) []Image {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Image
	for _, im := range s.region(regionName).images {
		if im.Owner == Account {
			out = append(out, cloneImage(im))
		}
	}
	return out
}

// Snapshots returns the snapshots of region.
func (s *Server) Snapshots(regionName string) []Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Snapshot
	for _, sn := range sortedValues(s.region(regionName).snapshots) {
		c := *sn
		c.Tags = cloneMap(sn.Tags)
		out = append(out, c)
	}
	return out
}

func cloneImage(im Image) Image {
	im.Tags = cloneMap(im.Tags)
	im.Snapshots = slices.Clone(im.Snapshots)
	return im
}

// AddSecurityGroup creates a group directly, as someone else might have.
func (s *Server) AddSecurityGroup(regionName string, g SecurityGroup) SecurityGroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	g.ID, g.Region = s.newID("sg-"), regionName
	if g.VPC == "" {
		g.VPC = DefaultVPC
	}
	s.region(regionName).groups[g.ID] = &g
	return g
}

// AddInstance creates a running instance directly, as someone else (or an
// earlier process) might have.
func (s *Server) AddInstance(regionName string, in Instance) Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	in.ID, in.Region = s.newID("i-"), regionName
	if in.State == "" {
		in.State = "running"
	}
	if in.LaunchTime.IsZero() {
		in.LaunchTime = s.now().UTC()
	}
	s.region(regionName).instances[in.ID] = &in
	return cloneInstance(&in)
}

// SetTags replaces some tags of a resource directly.
func (s *Server) SetTags(regionName, id string, tags map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range tags {
		s.setTag(s.region(regionName), id, k, v)
	}
}

func cloneInstance(in *Instance) Instance {
	out := *in
	out.Groups = slices.Clone(in.Groups)
	out.Tags = cloneMap(in.Tags)
	return out
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// region returns the state of name, seeding it on first use. s.mu is held.
func (s *Server) region(name string) *region {
	if r, ok := s.regions[name]; ok {
		return r
	}
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	r := &region{
		keys: map[string]*KeyPair{}, groups: map[string]*SecurityGroup{},
		instances: map[string]*Instance{}, volumes: map[string]*Volume{}, snapshots: map[string]*Snapshot{},
		vpcs: []string{DefaultVPC, "vpc-0other"},
		images: []Image{
			{ID: UbuntuAMD64Old, Name: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20260101", Owner: CanonicalOwner, Architecture: "x86_64", State: "available", Created: day(1)},
			{ID: UbuntuAMD64, Name: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20260110", Owner: CanonicalOwner, Architecture: "x86_64", State: "available", Created: day(10)},
			{ID: "ami-0000000000000a003", Name: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20260120", Owner: CanonicalOwner, Architecture: "x86_64", State: "pending", Created: day(20)},
			{ID: UbuntuARM64, Name: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-20260110", Owner: CanonicalOwner, Architecture: "arm64", State: "available", Created: day(10)},
			{ID: OtherNewest, Name: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20260125", Owner: "123456789012", Architecture: "x86_64", State: "available", Created: day(25)},
		},
	}
	s.regions[name] = r
	return r
}

func (s *Server) newID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%017x", prefix, s.seq)
}

// launched gives a new instance the address it will run at.
func (s *Server) launched(regionName, id string, hooks Hooks) *APIError {
	in, _ := s.Instance(regionName, id)
	ip := s.PublicIP
	if hooks.Launch != nil {
		var err error
		if ip, err = hooks.Launch(in); err != nil {
			return &APIError{Status: http.StatusInternalServerError, Code: "InternalError", Message: "launch hook: " + err.Error()}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.region(regionName).instances[id].Address = ip
	return nil
}

// APIError is an EC2 error answer.
type APIError struct {
	Status        int
	Code, Message string
}

func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func apiErr(code, format string, args ...any) *APIError {
	return &APIError{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

var credentialScope = regexp.MustCompile(`Credential=([^/]+)/[0-9]+/([a-z0-9-]+)/ec2/`)

// ServeHTTP answers one EC2 Query API request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, apiErr("MalformedQueryString", "%v", err))
		return
	}
	call := Call{Region: "us-east-1", Action: r.PostForm.Get("Action"), Params: r.PostForm}
	if m := credentialScope.FindStringSubmatch(r.Header.Get("Authorization")); m != nil {
		call.AccessKey, call.Region = m[1], m[2]
	} else {
		writeError(w, &APIError{Status: http.StatusUnauthorized, Code: "AuthFailure", Message: "request is not signed"})
		return
	}
	s.mu.Lock()
	s.calls = append(s.calls, call)
	ft := s.fault(call)
	before := s.hooks.BeforeCall
	s.mu.Unlock()
	if before != nil {
		before(call)
	}

	if ft != nil && !ft.After {
		s.misbehave(w, r.Context(), ft)
		return
	}
	body, err := s.handle(call)
	if ft != nil {
		s.misbehave(w, r.Context(), ft)
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	_, _ = w.Write(body)
}

// fault returns the fault that fires for call, if any. s.mu is held.
func (s *Server) fault(call Call) *Fault {
	for _, f := range s.faults {
		if f.Action != call.Action || (f.Match != nil && !f.Match(call)) || (f.Times > 0 && s.fired[f] >= f.Times) {
			continue
		}
		s.fired[f]++
		return f
	}
	return nil
}

func (s *Server) misbehave(w http.ResponseWriter, ctx context.Context, f *Fault) {
	if f.Hang {
		if f.OnHang != nil {
			f.OnHang()
		}
		select {
		case <-ctx.Done():
		case <-s.closed:
		}
		writeError(w, &APIError{Status: http.StatusServiceUnavailable, Code: "Unavailable", Message: "hung call ended"})
		return
	}
	e := &APIError{Status: f.Status, Code: f.Code, Message: f.Message}
	if e.Status == 0 {
		e.Status = http.StatusBadRequest
	}
	if e.Code == "" {
		e.Code = "InternalError"
	}
	if e.Message == "" {
		e.Message = "injected failure"
	}
	writeError(w, e)
}

func writeError(w http.ResponseWriter, e *APIError) {
	type xmlError struct {
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	}
	type response struct {
		XMLName   xml.Name   `xml:"Response"`
		Errors    []xmlError `xml:"Errors>Error"`
		RequestID string     `xml:"RequestID"`
	}
	body, _ := xml.Marshal(response{Errors: []xmlError{{e.Code, e.Message}}, RequestID: "fake-request"})
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(e.Status)
	_, _ = w.Write(append([]byte(xml.Header), body...))
}

// handle performs call and returns its XML answer.
func (s *Server) handle(call Call) ([]byte, *APIError) {
	h, ok := map[string]func(*region, Call) (any, *APIError){
		"ImportKeyPair":                 s.importKeyPair,
		"DescribeKeyPairs":              s.describeKeyPairs,
		"DeleteKeyPair":                 s.deleteKeyPair,
		"DescribeImages":                s.describeImages,
		"DescribeVpcs":                  s.describeVpcs,
		"DescribeSecurityGroups":        s.describeSecurityGroups,
		"CreateSecurityGroup":           s.createSecurityGroup,
		"AuthorizeSecurityGroupIngress": s.authorizeIngress,
		"DeleteSecurityGroup":           s.deleteSecurityGroup,
		"RunInstances":                  s.runInstances,
		"DescribeInstances":             s.describeInstances,
		"TerminateInstances":            s.terminateInstances,
		"CreateTags":                    s.createTags,
		"CreateImage":                   s.createImage,
		"DeregisterImage":               s.deregisterImage,
		"DescribeSnapshots":             s.describeSnapshots,
		"DeleteSnapshot":                s.deleteSnapshot,
	}[call.Action]
	if !ok {
		return nil, apiErr("InvalidAction", "the action %q is not valid for this web service", call.Action)
	}
	s.mu.Lock()
	out, err := h(s.region(call.Region), call)
	hooks := s.hooks
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	switch res := out.(type) {
	case runResponse:
		if res.fresh {
			if err := s.launched(call.Region, res.Instances[0].ID, hooks); err != nil {
				return nil, err
			}
		}
	case createImageResponse:
		if err := s.imaged(call.Region, res.instance, res.ID, hooks); err != nil {
			return nil, err
		}
	case terminateResponse:
		if hooks.Terminate != nil {
			for _, c := range res.Instances {
				if in, ok := s.Instance(call.Region, c.ID); ok {
					hooks.Terminate(in)
				}
			}
		}
	}
	body, merr := xml.Marshal(out)
	if merr != nil {
		return nil, &APIError{Status: http.StatusInternalServerError, Code: "InternalError", Message: merr.Error()}
	}
	return append([]byte(xml.Header), body...), nil
}

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

type xmlTag struct {
	Key   string `xml:"key"`
	Value string `xml:"value"`
}

func xmlTags(m map[string]string) []xmlTag {
	out := make([]xmlTag, 0, len(m))
	for k, v := range m {
		out = append(out, xmlTag{k, v})
	}
	slices.SortFunc(out, func(a, b xmlTag) int { return strings.Compare(a.Key, b.Key) })
	return out
}

type returnResponse struct {
	XMLName   xml.Name
	Xmlns     string `xml:"xmlns,attr"`
	RequestID string `xml:"requestId"`
	Return    bool   `xml:"return"`
}

func okResponse(action string) returnResponse {
	return returnResponse{XMLName: xml.Name{Local: action + "Response"}, Xmlns: xmlns, RequestID: "fake-request", Return: true}
}

// list returns the values of a flattened list parameter: prefix.1, prefix.2...
func list(p url.Values, prefix string) []string {
	var out []string
	for i := 1; ; i++ {
		v, ok := p[prefix+"."+strconv.Itoa(i)]
		if !ok {
			return out
		}
		out = append(out, v[0])
	}
}

// tagSpecs returns the tags requested for resourceType in TagSpecification.N.
func tagSpecs(p url.Values, resourceType string) map[string]string {
	tags := map[string]string{}
	for i := 1; ; i++ {
		prefix := "TagSpecification." + strconv.Itoa(i)
		rt, ok := p[prefix+".ResourceType"]
		if !ok {
			return tags
		}
		if rt[0] != resourceType {
			continue
		}
		for j := 1; ; j++ {
			k, ok := p[prefix+".Tag."+strconv.Itoa(j)+".Key"]
			if !ok {
				break
			}
			tags[k[0]] = p.Get(prefix + ".Tag." + strconv.Itoa(j) + ".Value")
		}
	}
}

// filter is one Filter.N of a Describe call.
type filter struct {
	name   string
	values []string
}

func filters(p url.Values) []filter {
	var out []filter
	for i := 1; ; i++ {
		prefix := "Filter." + strconv.Itoa(i)
		name, ok := p[prefix+".Name"]
		if !ok {
			return out
		}
		out = append(out, filter{name[0], list(p, prefix+".Value")})
	}
}

// matches reports whether a resource with attributes attr (filter name to
// values; tags as tag:<key> and tag-key) passes every filter.
func matches(fs []filter, attr func(name string) []string) bool {
	for _, f := range fs {
		have := attr(f.name)
		if !slices.ContainsFunc(f.values, func(want string) bool {
			return slices.ContainsFunc(have, func(h string) bool { return glob(want, h) })
		}) {
			return false
		}
	}
	return true
}

func tagAttr(tags map[string]string, name string) ([]string, bool) {
	if k, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, ok := tags[k]; ok {
			return []string{v}, true
		}
		return nil, true
	}
	if name == "tag-key" {
		var keys []string
		for k := range tags {
			keys = append(keys, k)
		}
		return keys, true
	}
	return nil, false
}

// glob matches EC2 filter wildcards: * any run, ? one character.
func glob(pattern, s string) bool {
	var re strings.Builder
	re.WriteString("^")
	for _, r := range pattern {
		switch r {
		case '*':
			re.WriteString(".*")
		case '?':
			re.WriteString(".")
		default:
			re.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	re.WriteString("$")
	return regexp.MustCompile(re.String()).MatchString(s)
}

// setTag sets a tag on whatever resource id names. s.mu is held.
func (s *Server) setTag(r *region, id, k, v string) bool {
	switch {
	case r.instances[id] != nil:
		r.instances[id].Tags[k] = v
	case r.volumes[id] != nil:
		r.volumes[id].Tags[k] = v
	case r.groups[id] != nil:
		r.groups[id].Tags[k] = v
	case r.keys[id] != nil:
		r.keys[id].Tags[k] = v
	case r.snapshots[id] != nil:
		r.snapshots[id].Tags[k] = v
	case r.image(id) != nil:
		r.image(id).Tags[k] = v
	default:
		return false
	}
	return true
}

func decodeUserData(v string) string {
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return v
	}
	return string(b)
}
