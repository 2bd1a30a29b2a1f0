package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// shareCoordinator fakes a coordinator's share routes for one lease
// (cbx_0123456789ab, slug tidal-lobster), as the API describes them, and
// records the requests it gets.
type shareCoordinator struct {
	mu       sync.Mutex
	share    api.LeaseShare
	requests []string
}

const sharedLease = "cbx_0123456789ab"

func newShareCoordinator(t *testing.T, start api.LeaseShare) (*shareCoordinator, []string) {
	c := &shareCoordinator{share: start}
	srv := httptest.NewServer(http.HandlerFunc(c.serve))
	t.Cleanup(srv.Close)
	env := append(stateEnv(t), "CRABBOX_COORDINATOR="+srv.URL, "CRABBOX_COORDINATOR_TOKEN=share-test-token")
	return c, env
}

func (c *shareCoordinator) serve(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.URL.Path == "/v1/leases" && r.Method == http.MethodGet {
		c.requests = append(c.requests, "GET leases?"+r.URL.RawQuery)
		json.NewEncoder(w).Encode(api.LeasesResponse{Leases: []api.Lease{{
			ID: "cbx_aaaaaaaaaaaa", Slug: "bobs-box", Provider: "hetzner", State: api.LeaseActive,
			Owner: "github:2", Org: "acme", Access: string(api.ShareUse),
		}}})
		return
	}
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/leases/")
	id, ok2 := strings.CutSuffix(id, "/share")
	if !ok || !ok2 || (id != sharedLease && id != "tidal-lobster") {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.Error{Code: api.CodeNotFound, Message: "lease " + id + " not found"})
		return
	}
	var body []byte
	if r.Body != nil {
		body, _ = readAll(r)
	}
	c.requests = append(c.requests, r.Method+" "+strings.TrimSpace(string(body)))
	switch r.Method {
	case http.MethodGet:
	case http.MethodPut:
		var s api.LeaseShare
		if err := json.Unmarshal(body, &s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.share = s
	case http.MethodDelete:
		var d api.ShareDeleteRequest
		_ = json.Unmarshal(body, &d)
		switch {
		case d.User != "":
			delete(c.share.Users, d.User)
		case d.Org:
			c.share.Org = ""
		default:
			c.share = api.LeaseShare{}
		}
	}
	json.NewEncoder(w).Encode(api.ShareResponse{LeaseID: sharedLease, Share: c.share})
}

func (c *shareCoordinator) log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.requests
	c.requests = nil
	return out
}

func TestShare(t *testing.T) {
	t.Parallel()
	c, env := newShareCoordinator(t, api.LeaseShare{Users: map[string]api.ShareRole{"github:1": api.ShareManage}})

	// Sharing adds to what is there; the default role is read.
	r := crabboxCmd(t, env, "", "share", "tidal-lobster", "--with", "GitHub:2, github:3")
	if want := "org=off\nuser=github:1 role=manage\nuser=github:2 role=read\nuser=github:3 role=read\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("share --with: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got, want := c.log(), []string{"GET ", `PUT {"users":{"github:1":"manage","github:2":"read","github:3":"read"}}`}; !cmp.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
	// The upstream client's spelling: --id, repeated --user, --role.
	r = crabboxCmd(t, env, "", "share", "--id", sharedLease, "--user", "github:2", "--user", "github:4", "--role", "use", "--org")
	if want := "org=use\nuser=github:1 role=manage\nuser=github:2 role=use\nuser=github:3 role=read\nuser=github:4 role=use\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("share --user --role: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	c.log()
	// Alone, or with --list, it only shows; --json prints {"share": ...}.
	r = crabboxCmd(t, env, "", "share", sharedLease, "--list", "--json")
	var got api.ShareResponse
	if err := json.Unmarshal([]byte(r.stdout), &got); r.code != 0 || err != nil || got.Share.Org != api.ShareUse || len(got.Share.Users) != 4 {
		t.Fatalf("share --list --json: exit %d, %v, stdout %s", r.code, err, r.stdout)
	}
	if reqs := c.log(); !cmp.Equal(reqs, []string{"GET "}) {
		t.Errorf("share --list sent %q, want one GET", reqs)
	}

	// unshare removes what it names and prints what is left.
	r = crabboxCmd(t, env, "", "unshare", sharedLease, "--with", "github:2,github:3", "--org")
	if want := "org=off\nuser=github:1 role=manage\nuser=github:4 role=use\n"; r.code != 0 || r.stdout != want {
		t.Fatalf("unshare: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if got, want := c.log(), []string{`DELETE {"user":"github:2"}`, `DELETE {"user":"github:3"}`, `DELETE {"org":true}`}; !cmp.Equal(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
	r = crabboxCmd(t, env, "", "unshare", "--id", sharedLease, "--all")
	if r.code != 0 || r.stdout != "org=off\nusers=none\n" {
		t.Fatalf("unshare --all: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	// A lease the coordinator does not show: its error.
	r = crabboxCmd(t, env, "", "share", "cbx_ffffffffffff", "--with", "github:9")
	if r.code != exitFailure || !strings.Contains(r.stderr, "not found") {
		t.Errorf("share of an unknown lease: exit %d, stderr %q", r.code, r.stderr)
	}
}

func TestShareRefusesBadInput(t *testing.T) {
	t.Parallel()
	c, env := newShareCoordinator(t, api.LeaseShare{})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"share"}, "want a lease ID or slug"},
		{[]string{"share", "a", "b"}, "want one lease"},
		{[]string{"share", sharedLease, "--id", "tidal-lobster"}, "differ"},
		{[]string{"share", sharedLease, "--with", "github:1,,github:2"}, "an empty user"},
		{[]string{"share", sharedLease, "--with", "github:1", "--role", "admin"}, `--role "admin"`},
		{[]string{"share", sharedLease, "--with", "github:1", "--use", "--manage"}, "one of --role, --use and --manage"},
		{[]string{"share", sharedLease, "--with", "github:1", "--list"}, "--list changes nothing"},
		{[]string{"unshare", sharedLease}, "--with USER, --org or --all"},
	} {
		r := crabboxCmd(t, env, "", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("crabbox %v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	if reqs := c.log(); len(reqs) != 0 {
		t.Errorf("bad input sent %q", reqs)
	}
	// Without a coordinator: a clear error.
	r := crabboxCmd(t, stateEnv(t), "", "share", sharedLease, "--with", "github:1")
	if r.code != exitFailure || !strings.Contains(r.stderr, "no coordinator configured") {
		t.Errorf("share without a coordinator: exit %d, stderr %q", r.code, r.stderr)
	}
}

func readAll(r *http.Request) ([]byte, error) {
	defer r.Body.Close()
	var b strings.Builder
	_, err := io.Copy(&b, r.Body)
	return []byte(b.String()), err
}

func TestListShared(t *testing.T) {
	t.Parallel()
	c, env := newShareCoordinator(t, api.LeaseShare{})
	r := crabboxCmd(t, env, "", "list", "--shared")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "ID SLUG OWNER ROLE STATE EXPIRES" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "cbx_aaaaaaaaaaaa bobs-box github:2 use active ") {
		t.Fatalf("list --shared: exit %d, stdout:\n%s\nstderr %q", r.code, r.stdout, r.stderr)
	}
	r = crabboxCmd(t, env, "", "list", "--shared", "--json")
	var leases []api.Lease
	if err := json.Unmarshal([]byte(r.stdout), &leases); r.code != 0 || err != nil || len(leases) != 1 || leases[0].Access != "use" {
		t.Fatalf("list --shared --json: exit %d, %v, stdout %s", r.code, err, r.stdout)
	}
	if got := c.log(); !cmp.Equal(got, []string{"GET leases?shared=true", "GET leases?shared=true"}) {
		t.Errorf("requests %q", got)
	}
}
