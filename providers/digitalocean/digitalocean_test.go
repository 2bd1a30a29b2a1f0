package digitalocean_test

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/digitalocean/godo"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/digitalocean"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "do-test-token-0123456789"

var (
	dropletPath  = regexp.MustCompile(`^/v2/droplets/(\d+)$`)
	actionsPath  = regexp.MustCompile(`^/v2/droplets/(\d+)/actions$`)
	snapsPath    = regexp.MustCompile(`^/v2/droplets/(\d+)/snapshots$`)
	actionPath   = regexp.MustCompile(`^/v2/actions/(\d+)$`)
	imagePath    = regexp.MustCompile(`^/v2/images/(\d+)$`)
	tagResources = regexp.MustCompile(`^/v2/tags/([^/]+)/resources$`)
	tagPath      = regexp.MustCompile(`^/v2/tags/([^/]+)$`)
)

// fakeAPI serves the DigitalOcean API's droplet, droplet action,
// snapshot (image) and tag routes in its JSON shapes over a fake cloud,
// whose boxes have disks: a snapshot is a copy of the Droplet's disk, and
// a Droplet created or rebuilt from it starts with a copy.
type fakeAPI struct {
	cloud *tagcloudtest.FakeCloud

	mu      sync.Mutex
	tags    map[string]bool // tags that exist in the account
	next    int
	images  map[int]*fakeImage
	actions map[int]*fakeAction
	events  []string // snapshot and image mutations, in order
	// boot, if set, keeps a droplet "new" that long after its create,
	// as a real one boots (benchmarks only: tests never wait on time).
	boot   time.Duration
	bornMu sync.Mutex // not mu: droplet is called with mu held
	born   map[int]time.Time
}

// fakeImage is a Droplet snapshot; it is listed once its action is done.
type fakeImage struct {
	img     godo.Image
	droplet int
	done    bool
}

// fakeAction is an action that is in progress until it is first read;
// then done makes its effect.
type fakeAction struct {
	a    godo.Action
	done func()
}

// installedDir is the box directory outside the work root that the
// conformance suite writes as installed software; every fake box has it
// on its disk.
const installedDir = "/opt/crabbox-fake/installed"

// imageName is the fleet's name of the disk image of snapshot id.
func imageName(id int) string { return "do-snapshot-" + strconv.Itoa(id) }

// newActionLocked records an in-progress action of typ on droplet.
func (f *fakeAPI) newActionLocked(typ string, droplet int, done func()) godo.Action {
	f.next++
	a := &fakeAction{a: godo.Action{ID: f.next, Status: "in-progress", Type: typ, ResourceID: droplet, ResourceType: "droplet",
		StartedAt: &godo.Timestamp{Time: time.Now().UTC().Truncate(time.Second)}, RegionSlug: "fra1"}, done: done}
	f.actions[a.a.ID] = a
	return a.a
}

// snapshots returns the done snapshots, by ID, that keep returns true for.
func (f *fakeAPI) snapshots(keep func(*fakeImage) bool) []godo.Image {
	out := []godo.Image{}
	for _, id := range slices.Sorted(maps.Keys(f.images)) {
		if im := f.images[id]; im.done && keep(im) {
			img := im.img
			img.Tags = slices.Clone(img.Tags)
			out = append(out, img)
		}
	}
	return out
}

// imageList returns the done snapshots, by ID.
func (f *fakeAPI) imageList() []godo.Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snapshots(func(*fakeImage) bool { return true })
}

func (f *fakeAPI) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeAPI) hasTag(tag string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tags[tag]
}

func errorBody(status int) string {
	id := map[int]string{401: "unauthorized", 403: "forbidden", 404: "not_found", 422: "unprocessable_entity"}[status]
	if id == "" {
		id = "server_error"
	}
	b, _ := json.Marshal(map[string]string{"id": id, "message": "fake " + http.StatusText(status)})
	return string(b)
}

func (f *fakeAPI) droplet(m tagcloudtest.FakeMachine) godo.Droplet {
	d := godo.Droplet{ID: m.ID, Name: m.Name, Status: "new", Tags: m.Tags,
		Size: &godo.Size{Slug: m.Size}, Region: &godo.Region{Slug: m.Region}, Networks: &godo.Networks{}}
	f.bornMu.Lock()
	booting := f.boot > 0 && time.Since(f.born[m.ID]) < f.boot
	f.bornMu.Unlock()
	if m.Reads > 1 && !booting {
		d.Status = "active"
		d.Networks.V4 = []godo.NetworkV4{{IPAddress: "10.110.0.2", Type: "private"}, {IPAddress: m.IPv4, Type: "public"}}
	}
	return d
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		tagcloudtest.Reply(w, http.StatusUnauthorized, errorBody(http.StatusUnauthorized))
		return
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v2/droplets":
		// The wire shape of a create: godo's request type cannot decode
		// its own image (it marshals the slug as a bare string).
		var req struct {
			Name, Region, Size string
			Image              json.RawMessage // a slug or a snapshot's ID
			UserData           string          `json:"user_data"`
			Tags               []string
			SSHKeys            []json.RawMessage `json:"ssh_keys"`
		}
		var slug string
		var imageID int
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil ||
			(json.Unmarshal(req.Image, &slug) != nil || slug == "") && (json.Unmarshal(req.Image, &imageID) != nil || imageID <= 0) {
			tagcloudtest.Reply(w, http.StatusBadRequest, errorBody(http.StatusBadRequest))
			return
		}
		from := ""
		if imageID != 0 {
			im := f.images[imageID]
			if im == nil || !im.done {
				tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"You specified an invalid image for Droplet creation."}`)
				return
			}
			if !slices.Contains(im.img.Regions, req.Region) {
				tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"The image is not available in the region."}`)
				return
			}
			slug, from = strconv.Itoa(imageID), imageName(imageID)
		}
		if len(req.SSHKeys) != 0 {
			tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"no account key expected"}`)
			return
		}
		for _, t := range req.Tags {
			if len(t) > digitalocean.MaxTagLength || !regexp.MustCompile(`^[a-zA-Z0-9_\-:]+$`).MatchString(t) {
				tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"invalid tag"}`)
				return
			}
		}
		m, ok, err := f.cloud.Create(tagcloudtest.FakeMachine{Name: req.Name, Size: req.Size, Region: req.Region, Image: slug, FromImage: from, Tags: req.Tags, UserData: req.UserData})
		switch {
		case err != nil:
			tagcloudtest.Reply(w, http.StatusInternalServerError, errorBody(500))
		case !ok:
			tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"Size is not available in this region."}`)
		default:
			m, _ = f.cloud.Get(m.ID)
			f.bornMu.Lock()
			if f.born == nil {
				f.born = map[int]time.Time{}
			}
			f.born[m.ID] = time.Now()
			f.bornMu.Unlock()
			tagcloudtest.WriteJSON(w, http.StatusAccepted, map[string]any{"droplet": f.droplet(m)}, errorBody)
		}
	case r.Method == http.MethodGet && p == "/v2/droplets":
		var out []godo.Droplet
		for _, m := range f.cloud.List(r.URL.Query().Get("tag_name")) {
			out = append(out, f.droplet(m))
		}
		tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"droplets": out, "links": map[string]any{}, "meta": map[string]int{"total": len(out)}}, errorBody)
	case dropletPath.MatchString(p):
		id, _ := strconv.Atoi(dropletPath.FindStringSubmatch(p)[1])
		if r.Method == http.MethodDelete {
			if !f.cloud.Delete(id) {
				tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		m, ok := f.cloud.Get(id)
		if !ok {
			tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
			return
		}
		tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"droplet": f.droplet(m)}, errorBody)
	case r.Method == http.MethodPost && actionsPath.MatchString(p):
		id, _ := strconv.Atoi(actionsPath.FindStringSubmatch(p)[1])
		f.dropletAction(w, r, id)
	case r.Method == http.MethodGet && actionPath.MatchString(p):
		id, _ := strconv.Atoi(actionPath.FindStringSubmatch(p)[1])
		a := f.actions[id]
		if a == nil {
			tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
			return
		}
		if a.a.Status == "in-progress" { // done by the first look
			a.a.Status, a.a.CompletedAt = "completed", &godo.Timestamp{Time: time.Now().UTC().Truncate(time.Second)}
			if a.done != nil {
				a.done()
			}
		}
		tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"action": a.a}, errorBody)
	case r.Method == http.MethodGet && snapsPath.MatchString(p):
		id, _ := strconv.Atoi(snapsPath.FindStringSubmatch(p)[1])
		if _, ok := f.cloud.Get(id); !ok {
			tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
			return
		}
		var out []map[string]any // the droplet snapshot shape: no tags, status or description
		for _, img := range f.snapshots(func(im *fakeImage) bool { return im.droplet == id }) {
			out = append(out, map[string]any{"id": img.ID, "name": img.Name, "created_at": img.Created, "regions": img.Regions,
				"min_disk_size": img.MinDiskSize, "size_gigabytes": img.SizeGigaBytes, "type": img.Type})
		}
		tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"snapshots": out, "links": map[string]any{}, "meta": map[string]int{"total": len(out)}}, errorBody)
	case r.Method == http.MethodGet && p == "/v2/images":
		tag := r.URL.Query().Get("tag_name")
		out := f.snapshots(func(im *fakeImage) bool { return tag == "" || slices.Contains(im.img.Tags, tag) })
		tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"images": out, "links": map[string]any{}, "meta": map[string]int{"total": len(out)}}, errorBody)
	case imagePath.MatchString(p):
		id, _ := strconv.Atoi(imagePath.FindStringSubmatch(p)[1])
		im := f.images[id]
		if im == nil || !im.done {
			tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
			return
		}
		switch r.Method {
		case http.MethodGet:
			tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"image": im.img}, errorBody)
		case http.MethodDelete:
			delete(f.images, id)
			f.events = append(f.events, "delete snapshot")
			_ = f.cloud.Fleet.DeleteImage(imageName(id))
			w.WriteHeader(http.StatusNoContent)
		default:
			tagcloudtest.Reply(w, http.StatusMethodNotAllowed, errorBody(405))
		}
	case r.Method == http.MethodPost && p == "/v2/tags":
		var req godo.TagCreateRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.tags[req.Name] = true
		tagcloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"tag": map[string]any{"name": req.Name}}, errorBody)
	case tagResources.MatchString(p):
		tag := tagResources.FindStringSubmatch(p)[1]
		var req godo.TagResourcesRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		if !f.tags[tag] {
			tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
			return
		}
		for _, res := range req.Resources {
			id, _ := strconv.Atoi(res.ID)
			if res.Type == godo.ImageResourceType {
				if im := f.images[id]; im != nil {
					im.img.Tags = slices.DeleteFunc(im.img.Tags, func(t string) bool { return t == tag })
					if r.Method == http.MethodPost {
						im.img.Tags = append(im.img.Tags, tag)
					}
				}
				continue
			}
			f.cloud.Update(id, func(tags []string) []string {
				tags = slices.DeleteFunc(tags, func(t string) bool { return t == tag })
				if r.Method == http.MethodPost {
					tags = append(tags, tag)
				}
				return tags
			})
		}
		w.WriteHeader(http.StatusNoContent)
	case tagPath.MatchString(p):
		tag := tagPath.FindStringSubmatch(p)[1]
		if !f.tags[tag] {
			tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
			return
		}
		if r.Method == http.MethodDelete {
			delete(f.tags, tag)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"tag": map[string]any{"name": tag, "resources": map[string]int{"count": f.cloud.Count(tag)}}}, errorBody)
	default:
		tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
	}
}

// dropletAction takes a snapshot of droplet id (its disk is copied now,
// and the snapshot is listed once the action is done) or rebuilds it from
// a snapshot (its box boots again from a copy, with its user data).
func (f *fakeAPI) dropletAction(w http.ResponseWriter, r *http.Request, id int) {
	var req struct {
		Type  string          `json:"type"`
		Name  string          `json:"name"`
		Image json.RawMessage `json:"image"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		tagcloudtest.Reply(w, http.StatusBadRequest, errorBody(http.StatusBadRequest))
		return
	}
	m, ok := f.cloud.Get(id)
	if !ok {
		tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
		return
	}
	switch req.Type {
	case "snapshot":
		f.next++
		sid := f.next
		if err := f.cloud.Fleet.SaveImage(m.IPv4, imageName(sid)); err != nil {
			tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"the droplet has no disk"}`)
			return
		}
		name := req.Name
		if name == "" {
			name = m.Name + "-snapshot"
		}
		im := &fakeImage{droplet: id, img: godo.Image{ID: sid, Name: name, Type: "snapshot", Distribution: "Debian", Regions: []string{m.Region},
			MinDiskSize: 50, SizeGigaBytes: 1.5, Created: time.Now().UTC().Format(time.RFC3339), Status: "available", Tags: []string{}}}
		f.images[sid] = im
		f.events = append(f.events, "snapshot droplet")
		a := f.newActionLocked("snapshot", id, func() { im.done = true })
		tagcloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"action": a}, errorBody)
	case "rebuild":
		var sid int
		if err := json.Unmarshal(req.Image, &sid); err != nil || f.images[sid] == nil || !f.images[sid].done {
			tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"invalid image"}`)
			return
		}
		if _, err := f.cloud.Rebuild(id, imageName(sid)); err != nil {
			tagcloudtest.Reply(w, http.StatusInternalServerError, errorBody(500))
			return
		}
		f.events = append(f.events, "rebuild droplet")
		a := f.newActionLocked("rebuild", id, nil)
		tagcloudtest.WriteJSON(w, http.StatusCreated, map[string]any{"action": a}, errorBody)
	default:
		tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"the fake does not take this action"}`)
	}
}

// Operations of the fake beyond tagcloudtest's, for faults.
const (
	opAction    = "droplet-action" // snapshot, rebuild
	opActionGet = "action-get"
	opImageGet  = "image-get"
)

// op classifies a request for faults.
func op(r *http.Request) string {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v2/droplets":
		return tagcloudtest.OpCreate
	case r.Method == http.MethodGet && p == "/v2/droplets":
		return tagcloudtest.OpList
	case r.Method == http.MethodGet && dropletPath.MatchString(p):
		return tagcloudtest.OpGet
	case r.Method == http.MethodDelete && dropletPath.MatchString(p):
		return tagcloudtest.OpDelete
	case r.Method == http.MethodPost && tagResources.MatchString(p):
		return tagcloudtest.OpTag
	case r.Method == http.MethodPost && actionsPath.MatchString(p):
		return opAction
	case r.Method == http.MethodGet && actionPath.MatchString(p):
		return opActionGet
	case r.Method == http.MethodGet && imagePath.MatchString(p):
		return opImageGet
	}
	return ""
}

// newEnv starts a fake DigitalOcean API and configures backends on it.
func newEnv(t *testing.T) (*tagcloudtest.Env, *fakeAPI) {
	cloud := tagcloudtest.NewFakeCloud(t)
	cloud.Fleet.UseDisks(t, installedDir)
	api := &fakeAPI{cloud: cloud, tags: map[string]bool{}, next: 5000, images: map[int]*fakeImage{}, actions: map[int]*fakeAction{}}
	faults := &tagcloudtest.Faults{Op: op, Body: errorBody}
	env := tagcloudtest.NewEnv(t, cloud, faults, api, [2]string{"s-1vcpu-2gb", "s-2vcpu-4gb"}, [2]string{"fra1", "ams3"},
		func(a tagcloudtest.BackendArgs) (provider.SSHLeaseBackend, error) {
			return digitalocean.New(digitalocean.Config{Token: testToken, Options: a.Options, MapAddress: a.MapAddress, PollInterval: a.PollInterval}, a.Runtime)
		})
	return env, api
}

func TestTagCloud(t *testing.T) {
	tagcloudtest.Run(t, tagcloudtest.Harness{NewEnv: func(t *testing.T) *tagcloudtest.Env {
		e, _ := newEnv(t)
		return e
	}, Installed: installedDir})
}

// TestTouchLeavesNoTags: a touch moves the time tags, and the tags it
// replaced are deleted from the account once nothing carries them.
func TestTouchLeavesNoTags(t *testing.T) {
	e, api := newEnv(t)
	b := e.Backend(t, clockwork.NewRealClock())
	req := tagcloudtest.NewRequest(t, time.Now())
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	later := req.ExpiresAt.Add(10 * time.Minute)
	touched, err := b.Touch(t.Context(), provider.TouchRequest{Lease: target, Now: req.CreatedAt.Add(time.Minute), ExpiresAt: later})
	if err != nil || !touched.ExpiresAt.Equal(later) {
		t.Fatalf("Touch = %+v, %v", touched, err)
	}
	old := "expires_at:" + strconv.FormatInt(req.ExpiresAt.Unix(), 10)
	if api.hasTag(old) {
		t.Errorf("tag %s is still in the account after the touch replaced it", old)
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	tagcloudtest.CheckEmpty(t, e)
}

func TestConfigure(t *testing.T) {
	spec := digitalocean.Provider{}.Spec()
	t.Setenv(digitalocean.TokenEnv, "")
	cfg, err := spec.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (digitalocean.Provider{}).Configure(cfg, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "DIGITALOCEAN_TOKEN") {
		t.Errorf("Configure without a token: %v", err)
	}
	t.Setenv(digitalocean.TokenEnv, testToken)
	if _, err := (digitalocean.Provider{}).Configure(cfg, provider.Runtime{}); err != nil {
		t.Errorf("Configure with defaults: %v", err)
	}
	for key, value := range map[string]string{"size": "S 1", "region": "fra1,Frankfurt", "boot-timeout": "soon", "endpoint": "api.example", "work-root": "rel"} {
		c, err := spec.Resolve(provider.Config{key: value})
		if err == nil {
			_, err = (digitalocean.Provider{}).Configure(c, provider.Runtime{})
		}
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=%q: %v, want an error naming the option", key, value, err)
		}
	}
	for _, o := range spec.Options {
		if strings.Contains(o.Name, "token") {
			t.Errorf("option %q: the token must come only from the environment", o.Name)
		}
	}
}
