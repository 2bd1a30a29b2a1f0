package tagcloudtest

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// FakeMachine is one machine of a FakeCloud.
type FakeMachine struct {
	ID                 int
	Name, Size, Region string
	Image              string
	Tags               []string
	UserData           string
	// FromImage, if set, is the fleet image (cloudtest.Fleet.SaveImage)
	// the machine's disk starts as.
	FromImage string
	IPv4      string
	// Reads counts the reads of the machine: it reports itself booting
	// on the first (the create's answer) and running after.
	Reads int
}

// FakeCloud is the state of a fake tag cloud that a provider's fake API
// serves in its own JSON shapes: machines with tags, booted as cloudtest
// boxes from their user data. It is safe for concurrent use.
type FakeCloud struct {
	Fleet *cloudtest.Fleet

	mu       sync.Mutex
	next     int
	machines map[int]*FakeMachine
	creates  []string
	full     map[string]bool
	noBoot   bool
}

// NewFakeCloud returns an empty fake cloud.
func NewFakeCloud(t testing.TB) *FakeCloud { return NewFakeCloudOf(cloudtest.NewFleet(t)) }

// NewFakeCloudOf is NewFakeCloud with the machines' boxes served by
// fleet (a loopback fleet, for a provider in another process).
func NewFakeCloudOf(fleet *cloudtest.Fleet) *FakeCloud {
	return &FakeCloud{Fleet: fleet, next: 1000, machines: map[int]*FakeMachine{}, full: map[string]bool{}}
}

// Create records a create attempt of size in region and, unless that is
// full (ok false), makes the machine and boots its box.
func (c *FakeCloud) Create(m FakeMachine) (out FakeMachine, ok bool, err error) {
	c.mu.Lock()
	c.creates = append(c.creates, m.Size+"/"+m.Region)
	if c.full[m.Size+"/"+m.Region] {
		c.mu.Unlock()
		return FakeMachine{}, false, nil
	}
	c.next++
	m.ID = c.next
	m.IPv4 = c.Fleet.NewAddress()
	m.Tags = slices.Clone(m.Tags)
	c.machines[m.ID] = &m
	boot := !c.noBoot
	c.mu.Unlock()
	if boot {
		var err error
		if m.FromImage != "" {
			err = c.Fleet.BootImage(m.IPv4, m.UserData, m.FromImage)
		} else {
			err = c.Fleet.Boot(m.IPv4, m.UserData)
		}
		if err != nil {
			return FakeMachine{}, true, err
		}
	}
	return m, true, nil
}

// Rebuild boots machine id again from the fleet image image, with its
// user data, as a rebuild does; ok is false when there is no such machine.
func (c *FakeCloud) Rebuild(id int, image string) (ok bool, err error) {
	c.mu.Lock()
	m, ok := c.machines[id]
	var ip, userData string
	if ok {
		m.FromImage, m.Reads = image, 0
		ip, userData = m.IPv4, m.UserData
	}
	c.mu.Unlock()
	if !ok {
		return false, nil
	}
	return true, c.Fleet.BootImage(ip, userData, image)
}

// Get reads machine id, counting the read.
func (c *FakeCloud) Get(id int) (FakeMachine, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok {
		return FakeMachine{}, false
	}
	m.Reads++
	return c.copy(m), true
}

func (c *FakeCloud) copy(m *FakeMachine) FakeMachine {
	out := *m
	out.Tags = slices.Clone(m.Tags)
	return out
}

// List returns the machines carrying tag ("" for all), by ID.
func (c *FakeCloud) List(tag string) []FakeMachine {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []FakeMachine
	for _, id := range slices.Sorted(maps.Keys(c.machines)) {
		m := c.machines[id]
		if tag == "" || slices.Contains(m.Tags, tag) {
			m.Reads++
			out = append(out, c.copy(m))
		}
	}
	return out
}

// Update changes machine id's tags with edit.
func (c *FakeCloud) Update(id int, edit func(tags []string) []string) (FakeMachine, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.machines[id]
	if !ok {
		return FakeMachine{}, false
	}
	m.Tags = edit(m.Tags)
	return c.copy(m), true
}

// Count returns how many machines carry tag.
func (c *FakeCloud) Count(tag string) int { return len(c.List(tag)) }

// Delete deletes machine id and halts its box.
func (c *FakeCloud) Delete(id int) bool {
	c.mu.Lock()
	m, ok := c.machines[id]
	delete(c.machines, id)
	c.mu.Unlock()
	if ok {
		_ = c.Fleet.Halt(m.IPv4)
	}
	return ok
}

// IDs returns the machines' IDs.
func (c *FakeCloud) IDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, id := range slices.Sorted(maps.Keys(c.machines)) {
		out = append(out, strconv.Itoa(id))
	}
	return out
}

// Creates returns the "size/region" of every create attempt.
func (c *FakeCloud) Creates() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.creates)
}

// SetFull makes creates of size in region fail for lack of capacity.
func (c *FakeCloud) SetFull(size, region string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.full[size+"/"+region] = true
}

// SetNoBoot makes new machines never serve SSH.
func (c *FakeCloud) SetNoBoot() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noBoot = true
}

// Options are the options of a backend on a fake at endpoint: e's sizes
// and regions, work root workRoot, a minute to boot.
func Options(endpoint, workRoot string, e *Env) tagcloud.Options {
	return tagcloud.Options{
		Sizes: e.Sizes[:], Regions: e.Regions[:], WorkRoot: workRoot, Owner: "tester",
		BootTimeout: time.Minute, Endpoint: endpoint,
	}
}

// Reply writes a JSON answer body with status.
func Reply(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// WriteJSON writes v as a JSON answer with status, or errBody(500) if v
// does not marshal.
func WriteJSON(w http.ResponseWriter, status int, v any, errBody func(int) string) {
	b, err := json.Marshal(v)
	if err != nil {
		Reply(w, http.StatusInternalServerError, errBody(http.StatusInternalServerError))
		return
	}
	Reply(w, status, string(b))
}

// BackendArgs are what a provider's backend on a fake is made of.
type BackendArgs struct {
	// Options point at the fake: its endpoint, the Env's sizes and
	// regions, a work root, a minute to boot.
	Options tagcloud.Options
	// MapAddress maps machines' addresses to the fake's boxes.
	MapAddress func(host string, port int) (string, int)
	// PollInterval is a second.
	PollInterval time.Duration
	// Runtime has the test's clock and an HTTP client to the fake.
	Runtime provider.Runtime
}

// NewEnv serves api (a provider's fake API over cloud, in its cloud's JSON
// shapes) with faults on loopback and returns the Env whose backends
// newBackend makes, trying sizes and regions in order.
func NewEnv(t *testing.T, cloud *FakeCloud, faults *Faults, api http.Handler, sizes, regions [2]string,
	newBackend func(BackendArgs) (provider.SSHLeaseBackend, error)) *Env {
	srv := faults.NewServer(t, api)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	work := t.TempDir()
	env := &Env{
		Faults: faults, Fleet: cloud.Fleet, Machines: cloud.IDs, Creates: cloud.Creates,
		NoBoot: cloud.SetNoBoot, Full: cloud.SetFull, Sizes: sizes, Regions: regions,
	}
	env.Backend = func(t *testing.T, clock clockwork.Clock) provider.SSHLeaseBackend {
		b, err := newBackend(BackendArgs{
			Options: Options(srv.URL, work, env), MapAddress: cloud.Fleet.MapAddress, PollInterval: time.Second,
			Runtime: provider.Runtime{Clock: clock, HTTPClient: &http.Client{Transport: tr}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return env
}

// CheckReleased fails t unless the fake account has no machine and its
// fleet no running box: the lease's machine was deleted at release.
func (c *FakeCloud) CheckReleased(t testing.TB) {
	t.Helper()
	if m := c.IDs(); len(m) != 0 {
		t.Errorf("machines left: %v", m)
	}
	if r := c.Fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}
