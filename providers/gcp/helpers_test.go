package gcp_test

import (
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEndpoint) != "" {
		os.Exit(acquireChild())
	}
	goleak.VerifyTestMain(m)
}

const sourceRange = "203.0.113.0/24"

var zones = []string{"europe-west1-b", "europe-west1-c"}

// env is one fake Compute Engine project and a backend configured
// against it.
type env struct {
	api  *fakeGCE
	cfg  gcp.Config
	rt   provider.Runtime
	logs *logbuf.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	api := newFakeGCE(t)
	logs := &logbuf.Buffer{}
	return &env{
		api: api,
		cfg: gcp.Config{
			Project: project, Zones: zones, SourceRange: sourceRange, WorkRoot: t.TempDir(), Owner: "Tester",
			Endpoint: api.URL, MapAddress: api.fleet.MapAddress, PollInterval: 10 * time.Millisecond, BootTimeout: time.Minute,
		},
		rt:   runtime(t, clockwork.NewRealClock(), logs),
		logs: logs,
	}
}

// runtime is a runtime logging into logs, with its own HTTP transport
// whose idle connections close when the test ends.
func runtime(t *testing.T, clock clockwork.Clock, logs *logbuf.Buffer) provider.Runtime {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return provider.Runtime{
		Clock: clock, HTTPClient: &http.Client{Transport: tr},
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func (e *env) backend(t *testing.T, edit ...func(*gcp.Config)) *gcp.Backend {
	t.Helper()
	cfg := e.cfg
	for _, f := range edit {
		f(&cfg)
	}
	b, err := gcp.New(cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newRequest(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	return cloudtest.NewRequest(t, now, "GCP")
}

// events normalises the fake's mutation log.
func events(api *fakeGCE) []string {
	ids := regexp.MustCompile(`cbx_[0-9a-f]{12}`)
	var out []string
	for _, e := range api.log() {
		out = append(out, ids.ReplaceAllString(e, "cbx_*"))
	}
	return out
}

// checkEmpty fails unless the fake project has no instance, no firewall
// rule and no running box.
func checkEmpty(t *testing.T, api *fakeGCE) {
	t.Helper()
	if in := api.instanceList(); len(in) != 0 {
		t.Errorf("instances left: %v", in)
	}
	if fw := api.firewallList(); len(fw) != 0 {
		t.Errorf("firewall rules left: %v", fw)
	}
	if r := api.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}
