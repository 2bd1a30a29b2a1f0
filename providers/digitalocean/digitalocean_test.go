package digitalocean_test

import (
	"encoding/json"
	"errors"
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
	tagResources = regexp.MustCompile(`^/v2/tags/([^/]+)/resources$`)
	tagPath      = regexp.MustCompile(`^/v2/tags/([^/]+)$`)
)

// fakeAPI serves the DigitalOcean API's droplet and tag routes in its
// JSON shapes over a fake cloud.
type fakeAPI struct {
	cloud *tagcloudtest.FakeCloud

	mu   sync.Mutex
	tags map[string]bool // tags that exist in the account
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
	if m.Reads > 1 {
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
			Name, Region, Size, Image string
			UserData                  string `json:"user_data"`
			Tags                      []string
			SSHKeys                   []json.RawMessage `json:"ssh_keys"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Image == "" {
			tagcloudtest.Reply(w, http.StatusBadRequest, errorBody(http.StatusBadRequest))
			return
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
		m, ok, err := f.cloud.Create(tagcloudtest.FakeMachine{Name: req.Name, Size: req.Size, Region: req.Region, Image: req.Image, Tags: req.Tags, UserData: req.UserData})
		switch {
		case err != nil:
			tagcloudtest.Reply(w, http.StatusInternalServerError, errorBody(500))
		case !ok:
			tagcloudtest.Reply(w, http.StatusUnprocessableEntity, `{"id":"unprocessable_entity","message":"Size is not available in this region."}`)
		default:
			m, _ = f.cloud.Get(m.ID)
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
	}
	return ""
}

// newEnv starts a fake DigitalOcean API and configures backends on it.
func newEnv(t *testing.T) (*tagcloudtest.Env, *fakeAPI) {
	cloud := tagcloudtest.NewFakeCloud(t)
	api := &fakeAPI{cloud: cloud, tags: map[string]bool{}}
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
	}})
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
