package cloudtest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
)

// Config adapts a cloud provider (its configuration type C) and its fake
// (the env E of its Rollback adapter) to the configuration suite: the
// spec, parsing and rejecting configuration, keeping secrets out of logs
// and errors, resolve, touch and release, and the doctor's checks.
type Config[E, C any] struct {
	// Fake is the provider's rollback adapter.
	Fake Rollback[E]
	// Provider is the provider's zero value; Name its registered name.
	Provider provider.Provider
	Name     string
	// SecretWords may appear in no option's name or flag: credentials
	// come only from the environment.
	SecretWords []string
	// Credentials sets valid credentials in the environment.
	Credentials func(t *testing.T)
	// ParseConfig parses a resolved configuration; Defaults is what it
	// makes of the spec's defaults alone.
	ParseConfig func(cfg provider.Config) (C, error)
	Defaults    C
	// Reject makes backends of e use a credential the API rejects, and
	// returns it.
	Reject func(e E) string
	// Secret is the valid credential of the fake.
	Secret string
	// Logs is what backends of e logged.
	Logs func(e E) string
	// ReleaseEvents end the mutations of a release.
	ReleaseEvents []string
	// Runtime is the runtime backends of e use.
	Runtime func(e E) provider.Runtime
	// Features are the features the spec declares after the ones every
	// cloud has (the checkpoint features, say), in order.
	Features []provider.Feature
}

// BadConfig is a configuration the provider rejects, with an error
// containing WantErr.
type BadConfig struct {
	Name    string
	Cfg     provider.Config
	WantErr string
}

// DoctorCase is a doctor run on a fake changed by Change (if set).
type DoctorCase[E any] struct {
	Name   string
	Change func(e E)
	Want   []provider.Check
}

// RunSpec checks the registered spec: an SSH lease provider supporting
// the coordinator with the features SSH, pinned host key, cleanup and
// doctor, then c.Features; no option for a secret; slices not shared with
// callers.
func RunSpec[E, C any](t *testing.T, c Config[E, C]) {
	t.Helper()
	p, err := provider.Default().Lookup(c.Name)
	if err != nil {
		t.Fatalf("%s is not registered: %v", c.Name, err)
	}
	s := p.Spec()
	if s.Kind != provider.KindSSHLease || s.Coordinator != provider.CoordinatorSupported {
		t.Errorf("kind %s, coordinator %s; want ssh-lease, supported", s.Kind, s.Coordinator)
	}
	want := append([]provider.Feature{provider.FeatureSSH, provider.FeaturePinnedHostKey, provider.FeatureCleanup, provider.FeatureDoctor}, c.Features...)
	if diff := cmp.Diff(want, s.Features); diff != "" {
		t.Errorf("features (-want +got):\n%s", diff)
	}
	for _, o := range s.Options {
		for _, w := range c.SecretWords {
			if strings.Contains(o.Name, w) || strings.Contains(o.Flag, w) {
				t.Errorf("option %q/%q: the credentials must come only from the environment", o.Name, o.Flag)
			}
		}
	}
	s.Features[0] = "mutated"
	if c.Provider.Spec().Features[0] != provider.FeatureSSH {
		t.Errorf("Spec shares its slices with callers")
	}
}

// RunConfigure checks that the spec's defaults parse to c.Defaults and
// configure a cleanup backend, and that every bad configuration is
// rejected with its error.
func RunConfigure[E, C any](t *testing.T, c Config[E, C], bad []BadConfig) {
	t.Helper()
	spec := c.Provider.Spec()
	t.Run("defaults", func(t *testing.T) {
		c.Credentials(t)
		cfg, err := spec.Resolve(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.ParseConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(c.Defaults, got); diff != "" {
			t.Errorf("ParseConfig (-want +got):\n%s", diff)
		}
		b, err := c.Provider.Configure(cfg, provider.Runtime{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := b.(provider.CleanupBackend); !ok {
			t.Errorf("backend is not a CleanupBackend")
		}
	})
	for _, tt := range bad {
		t.Run(tt.Name, func(t *testing.T) {
			c.Credentials(t)
			cfg, err := spec.Resolve(tt.Cfg)
			if err == nil {
				_, err = c.Provider.Configure(cfg, provider.Runtime{})
			}
			if err == nil || !strings.Contains(err.Error(), tt.WantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.WantErr)
			}
		})
	}
}

// RunSecrets: neither the credential nor the private host key appears in
// logs or errors, whether the API accepts the credential or rejects it.
func RunSecrets[E, C any](t *testing.T, c Config[E, C]) {
	t.Helper()
	f := c.Fake
	e := f.New(t)
	b := f.Backend(t, e)
	req, _ := f.Request(t, time.Now())
	target, err := b.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	rejected := c.Reject(e)
	wrong := f.Backend(t, e)
	req2, _ := f.Request(t, time.Now())
	_, err = wrong.Acquire(context.Background(), req2)
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Fatalf("Acquire with a rejected credential: %v, want ErrUnauthenticated", err)
	}
	for _, s := range []string{c.Logs(e), err.Error()} {
		for _, secret := range []string{c.Secret, rejected, "PRIVATE KEY"} {
			if strings.Contains(s, secret) {
				t.Errorf("%q appears in %q", secret, s)
			}
		}
	}
	if !strings.Contains(c.Logs(e), c.Name+" lease acquired") {
		t.Errorf("logs lack the acquire: %s", c.Logs(e))
	}
}

// RunResolveTouch: unknown references do not resolve; touch (with and
// without the cloud ID) moves the expiry, keeps the host key and port
// and relabels the machine, but not another lease's; release deletes
// (its mutations end with c.ReleaseEvents), after which touch finds
// nothing; a malformed lease ID is refused.
func RunResolveTouch[E, C any](t *testing.T, c Config[E, C]) {
	t.Helper()
	f := c.Fake
	e := f.New(t)
	b := f.Backend(t, e)
	ctx := context.Background()
	req, _ := f.Request(t, time.Now())
	target, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"no-such-slug", "cbx_000000000000", "Not A Ref!"} {
		if _, err := b.Resolve(ctx, provider.ResolveRequest{ID: ref}); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Resolve(%q) = %v, want ErrNotFound", ref, err)
		}
	}
	now, later := req.CreatedAt.Add(5*time.Minute), req.ExpiresAt.Add(5*time.Minute)
	for _, lt := range []provider.LeaseTarget{target, {LeaseID: req.LeaseID}} { // with and without the cloud ID
		touched, err := b.Touch(ctx, provider.TouchRequest{Lease: lt, Now: now, ExpiresAt: later})
		if err != nil {
			t.Fatal(err)
		}
		if !touched.ExpiresAt.Equal(later) || touched.HostKey != target.HostKey || touched.Port != target.Port {
			t.Errorf("Touch = %+v, want expiry %v and the same host key and port", touched, later)
		}
	}
	unix := func(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
	labels := f.Machines(e)[0]
	if labels["last_touched_at"] != unix(now) || labels["expires_at"] != unix(later) || labels["state"] != "ready" {
		t.Errorf("labels after Touch: %v", labels)
	}
	other := target
	other.LeaseID = "cbx_000000000000" // right cloud ID, wrong lease
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: other, Now: now, ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch of another lease's %s ID: %v, want ErrNotFound", f.Noun, err)
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Touch(ctx, provider.TouchRequest{Lease: target, Now: now, ExpiresAt: later}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Touch after release: %v, want ErrNotFound", err)
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: "web-1"}}); err == nil {
		t.Errorf("ReleaseLease of a malformed lease ID: no error")
	}
	if got := f.Events(e); len(got) < len(c.ReleaseEvents) || !slices.Equal(got[len(got)-len(c.ReleaseEvents):], c.ReleaseEvents) {
		t.Errorf("release mutations %v: want them to end with %v", got, c.ReleaseEvents)
	}
}

// RunDoctor runs each doctor case and checks its checks, and that the
// doctor changed nothing.
func RunDoctor[E, C any](t *testing.T, c Config[E, C], cases []DoctorCase[E]) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			e := c.Fake.New(t)
			if tt.Change != nil {
				tt.Change(e)
			}
			got, err := c.Fake.Backend(t, e).Doctor(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.Want, got); diff != "" {
				t.Errorf("Doctor (-want +got):\n%s", diff)
			}
			if ev := c.Fake.Events(e); len(ev) != 0 {
				t.Errorf("Doctor changed the cloud: %v", ev)
			}
		})
	}
}

// RunEndpointOption: the endpoint option points a backend configured
// from cfg (which names the fake's URL as its endpoint) at the fake.
func RunEndpointOption[E, C any](t *testing.T, c Config[E, C], cfg func(e E) provider.Config) {
	t.Helper()
	e := c.Fake.New(t)
	c.Credentials(t)
	resolved, err := c.Provider.Spec().Resolve(cfg(e))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Provider.Configure(resolved, c.Runtime(e))
	if err != nil {
		t.Fatal(err)
	}
	checks, err := b.(provider.DoctorBackend).Doctor(context.Background())
	if err != nil || len(checks) == 0 || !checks[0].OK {
		t.Errorf("Doctor through the endpoint option = %+v, %v; want the fake API reached", checks, err)
	}
}
