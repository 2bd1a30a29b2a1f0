package linode_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/linode/linodego"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud/tagcloudtest"
	"github.com/crabbox-dev/crabbox/providers/linode"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "linode-test-token-0123456789"

var instancePath = regexp.MustCompile(`^/v4/linode/instances/(\d+)$`)

// fakeAPI serves the Linode API's instance routes in its JSON shapes over
// a fake cloud.
type fakeAPI struct{ cloud *tagcloudtest.FakeCloud }

func errorBody(status int) string {
	b, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"reason": "fake " + http.StatusText(status)}}})
	return string(b)
}

func (f *fakeAPI) instance(m tagcloudtest.FakeMachine) map[string]any {
	in := map[string]any{"id": m.ID, "label": m.Name, "status": "provisioning", "tags": m.Tags,
		"region": m.Region, "type": m.Size, "image": m.Image, "ipv4": []string{m.IPv4, "192.168.128.9"}}
	if m.Tags == nil {
		in["tags"] = []string{}
	}
	if m.Reads > 1 {
		in["status"] = "running"
	}
	return in
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		tagcloudtest.Reply(w, http.StatusUnauthorized, errorBody(http.StatusUnauthorized))
		return
	}
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v4/linode/instances":
		var req linodego.InstanceCreateOptions
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Metadata == nil || len(req.AuthorizedKeys) != 1 {
			tagcloudtest.Reply(w, http.StatusBadRequest, errorBody(http.StatusBadRequest))
			return
		}
		for _, t := range req.Tags {
			if len(t) < 3 || len(t) > linode.MaxTagLength {
				tagcloudtest.Reply(w, http.StatusBadRequest, `{"errors":[{"reason":"Length must be 3-50 characters","field":"tags"}]}`)
				return
			}
		}
		userData, err := base64.StdEncoding.DecodeString(req.Metadata.UserData)
		if err != nil {
			tagcloudtest.Reply(w, http.StatusBadRequest, errorBody(http.StatusBadRequest))
			return
		}
		m, ok, err := f.cloud.Create(tagcloudtest.FakeMachine{Name: req.Label, Size: req.Type, Region: req.Region, Image: req.Image, Tags: req.Tags, UserData: string(userData)})
		switch {
		case err != nil:
			tagcloudtest.Reply(w, http.StatusInternalServerError, errorBody(500))
		case !ok:
			tagcloudtest.Reply(w, http.StatusBadRequest, `{"errors":[{"reason":"Linode type is not available in this region.","field":"type"}]}`)
		default:
			m, _ = f.cloud.Get(m.ID)
			tagcloudtest.WriteJSON(w, http.StatusOK, f.instance(m), errorBody)
		}
	case r.Method == http.MethodGet && p == "/v4/linode/instances":
		var filter map[string]string
		if h := r.Header.Get("X-Filter"); h != "" {
			if err := json.Unmarshal([]byte(h), &filter); err != nil {
				tagcloudtest.Reply(w, http.StatusBadRequest, errorBody(http.StatusBadRequest))
				return
			}
		}
		out := []map[string]any{}
		for _, m := range f.cloud.List(filter["tags"]) {
			out = append(out, f.instance(m))
		}
		tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{"data": out, "page": 1, "pages": 1, "results": len(out)}, errorBody)
	case instancePath.MatchString(p):
		id, _ := strconv.Atoi(instancePath.FindStringSubmatch(p)[1])
		var (
			m  tagcloudtest.FakeMachine
			ok bool
		)
		switch r.Method {
		case http.MethodDelete:
			if f.cloud.Delete(id) {
				tagcloudtest.WriteJSON(w, http.StatusOK, map[string]any{}, errorBody)
				return
			}
		case http.MethodPut:
			var req struct {
				Tags *[]string `json:"tags"`
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Tags == nil {
				tagcloudtest.Reply(w, http.StatusBadRequest, errorBody(http.StatusBadRequest))
				return
			}
			m, ok = f.cloud.Update(id, func([]string) []string { return *req.Tags })
		default:
			m, ok = f.cloud.Get(id)
		}
		if !ok {
			tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
			return
		}
		tagcloudtest.WriteJSON(w, http.StatusOK, f.instance(m), errorBody)
	default:
		tagcloudtest.Reply(w, http.StatusNotFound, errorBody(404))
	}
}

// op classifies a request for faults.
func op(r *http.Request) string {
	p := r.URL.Path
	switch {
	case r.Method == http.MethodPost && p == "/v4/linode/instances":
		return tagcloudtest.OpCreate
	case r.Method == http.MethodGet && p == "/v4/linode/instances":
		return tagcloudtest.OpList
	case r.Method == http.MethodGet && instancePath.MatchString(p):
		return tagcloudtest.OpGet
	case r.Method == http.MethodPut && instancePath.MatchString(p):
		return tagcloudtest.OpTag
	case r.Method == http.MethodDelete && instancePath.MatchString(p):
		return tagcloudtest.OpDelete
	}
	return ""
}

// newEnv starts a fake Linode API and configures backends on it.
func newEnv(t *testing.T) (*tagcloudtest.Env, *fakeAPI) {
	cloud := tagcloudtest.NewFakeCloud(t)
	api := &fakeAPI{cloud: cloud}
	faults := &tagcloudtest.Faults{Op: op, Body: errorBody}
	env := tagcloudtest.NewEnv(t, cloud, faults, api, [2]string{"g6-standard-1", "g6-standard-2"}, [2]string{"eu-central", "nl-ams"},
		func(a tagcloudtest.BackendArgs) (provider.SSHLeaseBackend, error) {
			return linode.New(linode.Config{Token: testToken, Options: a.Options, MapAddress: a.MapAddress, PollInterval: a.PollInterval, NoRetries: true}, a.Runtime)
		})
	return env, api
}

func TestTagCloud(t *testing.T) {
	tagcloudtest.Run(t, tagcloudtest.Harness{NewEnv: func(t *testing.T) *tagcloudtest.Env {
		e, _ := newEnv(t)
		return e
	}})
}

func TestConfigure(t *testing.T) {
	spec := linode.Provider{}.Spec()
	t.Setenv(linode.TokenEnv, "")
	cfg, err := spec.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (linode.Provider{}).Configure(cfg, provider.Runtime{}); !errors.Is(err, provider.ErrUnauthenticated) || !strings.Contains(err.Error(), "LINODE_TOKEN") {
		t.Errorf("Configure without a token: %v", err)
	}
	t.Setenv(linode.TokenEnv, testToken)
	if _, err := (linode.Provider{}).Configure(cfg, provider.Runtime{}); err != nil {
		t.Errorf("Configure with defaults: %v", err)
	}
	for key, value := range map[string]string{"size": "S 1", "region": "fra1,Frankfurt", "boot-timeout": "soon", "endpoint": "api.example", "work-root": "rel"} {
		c, err := spec.Resolve(provider.Config{key: value})
		if err == nil {
			_, err = (linode.Provider{}).Configure(c, provider.Runtime{})
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

// TestAnswersWithoutErrorList: linodego takes an answer for a success
// unless it carries Linode's error list; the provider makes every failed
// answer an error that names its status and kind and never the token,
// in doctor and in the lease operations.
func TestAnswersWithoutErrorList(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		status                  int
		want                    error
		inDetail                string
	}{
		{"403 with another error shape", "application/json", `{"error":{"code":"forbidden","message":"refused by a proxy"}}`, 403,
			provider.ErrUnauthenticated, "403 Forbidden without an error list (application/json): " + `{"error":{"code":"forbidden","message":"refused by a proxy"}}`},
		{"401 empty", "", "", 401, provider.ErrUnauthenticated, "401 Unauthorized without an error list"},
		{"404 with an empty error list", "application/json", `{"errors":[]}`, 404, provider.ErrNotFound, "404 Not Found without an error list"},
		{"400 not JSON", "application/json", `bad request`, 400, provider.ErrPrecondition, "400 Bad Request without an error list (application/json): bad request"},
		{"500 HTML echoing the token", "text/html", "<html>\n<p>oops " + testToken + "</p></html>", 500, provider.ErrTransient,
			"500 Internal Server Error without an error list (text/html): <html> <p>oops [token]</p></html>"},
		{"304 not a redirect", "", "", 304, provider.ErrTransient, "unexpected answer 304 Not Modified"},
		{"302 nowhere", "", "", 302, provider.ErrTransient, "unexpected answer 302 Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			b, err := linode.New(linode.Config{
				Token: testToken, NoRetries: true,
				Options: tagcloud.Options{Endpoint: srv.URL, Owner: "tester"},
			}, provider.Runtime{HTTPClient: &http.Client{Transport: tr}})
			if err != nil {
				t.Fatal(err)
			}
			checks, err := b.Doctor(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(checks) != 1 || checks[0].OK {
				t.Fatalf("Doctor = %+v, want one failed API check", checks)
			}
			if d := checks[0].Detail; !strings.Contains(d, tt.inDetail) || strings.Contains(d, testToken) {
				t.Errorf("Doctor detail = %q, want it to contain %q and not the token", d, tt.inDetail)
			}
			_, err = b.Resolve(t.Context(), provider.ResolveRequest{ID: "tidal-lobster"})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.inDetail) || strings.Contains(err.Error(), testToken) {
				t.Errorf("Resolve = %v, want %v naming %q without the token", err, tt.want, tt.inDetail)
			}
		})
	}
}
