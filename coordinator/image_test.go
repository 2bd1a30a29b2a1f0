package coordinator_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// createRaw creates a lease from a request whose "image" is the raw JSON
// given (omitted when empty) and returns the answer's lease object.
func createRaw(t *testing.T, e *env, token, image string) map[string]any {
	t.Helper()
	body := createBody(t, image)
	return rawLease(t, callOK(t, e, "POST", "/v1/leases", token, body, http.StatusCreated))
}

func createBody(t *testing.T, image string) string {
	t.Helper()
	raw, err := json.Marshal(leaseReq(t))
	if err != nil {
		t.Fatal(err)
	}
	body := string(raw)
	if image != "" {
		body = strings.TrimSuffix(body, "}") + `,"image":` + image + "}"
	}
	return body
}

// TestLeaseImageOnTheWire: a create names its image as the string
// existing clients send or as the object; every answer carries the
// object; a lease without an image has none.
func TestLeaseImageOnTheWire(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open)
		alice := e.token("alice", "acme")
		want := map[string]any{"id": "ubuntu-24.04", "source": "explicit", "provider": "fake"}
		for _, image := range []string{
			`"ubuntu-24.04"`,
			`{"id":"ubuntu-24.04"}`,
			`{"id":"ubuntu-24.04","source":"promoted","kind":"aws-ami","region":"x"}`, // the coordinator says where it came from
		} {
			l := createRaw(t, e, alice, image)
			if diff := cmp.Diff(want, l["image"]); diff != "" {
				t.Errorf("create with image %s (-want +got):\n%s", image, diff)
			}
			got := rawLease(t, callOK(t, e, "GET", leasePath(l["id"].(string), ""), alice, nil, http.StatusOK))
			if diff := cmp.Diff(want, got["image"]); diff != "" {
				t.Errorf("get after image %s (-want +got):\n%s", image, diff)
			}
		}
		if l := createRaw(t, e, alice, ""); l["image"] != nil {
			t.Errorf("lease without an image answers image %v", l["image"])
		}
		var typed api.LeaseResponse
		e.do("POST", "/v1/leases", alice, createBody(t, `"debian-12"`), http.StatusCreated, &typed)
		if diff := cmp.Diff(&api.LeaseImage{ID: "debian-12", Source: api.ImageExplicit, Provider: "fake"}, typed.Lease.Image); diff != "" {
			t.Errorf("api.Lease image (-want +got):\n%s", diff)
		}
	})
}

// TestLeaseImageRejected: an image that is neither a string nor an object
// with a string id is a 400 naming the field, and creates nothing.
func TestLeaseImageRejected(t *testing.T) {
	e := simple(t, func(t *testing.T) store.Store { return openSQLite(t) })
	alice := e.token("alice", "acme")
	for _, image := range []string{`42`, `true`, `["ubuntu-24.04"]`, `{"source":"explicit"}`, `{"id":""}`, `{"id":5}`} {
		ae := e.fail("POST", "/v1/leases", alice, createBody(t, image), http.StatusBadRequest, api.CodeInvalidRequest)
		if !strings.Contains(ae.Message, `"image"`) {
			t.Errorf("image %s: message %q does not name the field", image, ae.Message)
		}
	}
	var out api.LeasesResponse
	e.do("GET", "/v1/leases", alice, nil, http.StatusOK, &out)
	if a, _ := e.fake.counts(); len(out.Leases) != 0 || len(a) != 0 {
		t.Errorf("refused creates left leases %v, provider calls %v", out.Leases, a)
	}
}

// TestLeaseImageSource: a provider's configured default image is
// "provider-default"; one the request names is "explicit"; a lease stored
// before sources were recorded shows its image as explicit.
func TestLeaseImageSource(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		e := simple(t, open, withSizing(fakeProvider, coordinator.Sizing{Default: coordinator.Size{Image: "debian-12", Location: "fsn1", ServerTypes: []string{"cx22"}}}))
		alice := e.token("alice", "acme")
		for image, want := range map[string]map[string]any{
			"":            {"id": "debian-12", "source": "provider-default", "provider": "fake", "region": "fsn1"},
			`"debian-12"`: {"id": "debian-12", "source": "explicit", "provider": "fake", "region": "fsn1"},
		} {
			if diff := cmp.Diff(want, createRaw(t, e, alice, image)["image"]); diff != "" {
				t.Errorf("image %q (-want +got):\n%s", image, diff)
			}
		}

		old := store.Lease{
			ID: "cbx_00000000001d", Slug: "old-crab", Provider: fakeProvider, State: store.StateProvisioning,
			Owner: "alice", Org: "acme", Target: "linux", Image: "ubuntu-22.04",
			SSHUser: "crabbox", SSHPort: "2222", WorkRoot: "/work/crabbox",
			TTLSeconds: 5400, IdleTimeoutSeconds: 1800, CreatedAt: start, LastTouchedAt: start,
		}
		if _, err := e.store.CreateLease(t.Context(), store.CreateRequest{Lease: old, AttemptID: api.NewCreateAttemptID(), Now: start}); err != nil {
			t.Fatal(err)
		}
		got := rawLease(t, callOK(t, e, "GET", leasePath(old.ID, ""), alice, nil, http.StatusOK))
		if diff := cmp.Diff(map[string]any{"id": "ubuntu-22.04", "source": "explicit", "provider": "fake"}, got["image"]); diff != "" {
			t.Errorf("lease stored without a source (-want +got):\n%s", diff)
		}
	})
}

// TestLeaseImageReadsOlderAnswers: our client reads the bare string older
// coordinators answered, as an explicit image.
func TestLeaseImageReadsOlderAnswers(t *testing.T) {
	var out api.LeaseResponse
	if err := json.Unmarshal([]byte(`{"lease":{"id":"cbx_000000000001","image":"ubuntu-24.04"}}`), &out); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&api.LeaseImage{ID: "ubuntu-24.04", Source: api.ImageExplicit}, out.Lease.Image); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	raw, err := json.Marshal(api.LeaseRequest{Image: "ubuntu-24.04"})
	if err != nil || !strings.Contains(string(raw), `"image":"ubuntu-24.04"`) {
		t.Errorf("a request sends its image as the string existing coordinators read: %s, %v", raw, err)
	}
}
