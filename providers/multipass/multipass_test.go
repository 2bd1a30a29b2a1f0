package multipass_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/provider/providertest"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
	"github.com/crabbox-dev/crabbox/providers/multipass"
	"github.com/crabbox-dev/crabbox/providers/multipass/internal/fakemultipass"
)

func TestMain(m *testing.M) {
	if os.Getenv(programEnv) != "" {
		os.Exit(program(os.Args[1:]))
	}
	goleak.VerifyTestMain(m)
}

// programEnv makes the test binary a tiny multipass program (program),
// for the tests of the real command runner.
const programEnv = "CRABBOX_TEST_MULTIPASS_PROGRAM"

// program answers as multipass does with no instances: version, an empty
// list, and info of an instance that does not exist.
func program(args []string) int {
	switch strings.Join(args, " ") {
	case "version --format json":
		fmt.Println(`{"multipass": "1.16.1", "multipassd": "1.16.1"}`)
	case "list --format json":
		fmt.Println(`{"list": []}`)
	default:
		if len(args) == 4 && args[0] == "info" {
			fmt.Fprintf(os.Stderr, "info failed: instance %q does not exist\n", args[3])
			return 2
		}
		fmt.Fprintf(os.Stderr, "Unknown command: %q\n", args)
		return 1
	}
	return 0
}

const bin = "/snap/bin/multipass"

// labelFaults is the file label store with writes that fail on demand.
type labelFaults struct {
	multipass.FileLabels
	mu     sync.Mutex
	writes int
	fail   map[int]bool // by the write's number, from 1
}

func (l *labelFaults) Write(name string, tags []string) error {
	l.mu.Lock()
	l.writes++
	fail := l.fail[l.writes]
	l.mu.Unlock()
	if fail {
		return fmt.Errorf("write the labels of instance %s: fake: no space left on device", name)
	}
	return l.FileLabels.Write(name, tags)
}

// failWrite makes the n-th label write fail.
func (l *labelFaults) failWrite(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail == nil {
		l.fail = map[int]bool{}
	}
	l.fail[n] = true
}

// recorder records the commands a backend runs.
type recorder struct {
	provider.CommandRunner
	mu   sync.Mutex
	cmds [][]string
}

func (r *recorder) Run(ctx context.Context, cmd provider.Command) error {
	r.mu.Lock()
	r.cmds = append(r.cmds, slices.Clone(cmd.Args))
	r.mu.Unlock()
	return r.CommandRunner.Run(ctx, cmd)
}

func (r *recorder) commands() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.cmds)
}

// env is a fake multipass and a backend configuration on it.
type env struct {
	fake   *fakemultipass.CLI
	fleet  *cloudtest.Fleet
	labels *labelFaults
	run    *recorder
	cfg    multipass.Config
	rt     provider.Runtime
}

func newEnv(t *testing.T) *env {
	t.Helper()
	fleet := cloudtest.NewFleet(t)
	fake := fakemultipass.New(bin, fleet)
	labels := &labelFaults{FileLabels: multipass.FileLabels{Dir: filepath.Join(t.TempDir(), "instances")}}
	run := &recorder{CommandRunner: fake}
	return &env{
		fake: fake, fleet: fleet, labels: labels, run: run,
		cfg: multipass.Config{
			Binary: bin, CPUs: 2, Memory: "2G", Disk: "10G", Image: "24.04", WorkRoot: t.TempDir(), Owner: "tester",
			BootTimeout: time.Minute, Labels: labels, MapAddress: fleet.MapAddress, PollInterval: time.Second,
		},
		rt: provider.Runtime{Clock: clockwork.NewRealClock(), Commands: run},
	}
}

func (e *env) backend(t *testing.T) *multipass.Backend {
	t.Helper()
	b, err := multipass.New(e.cfg, e.rt)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newRequest(t *testing.T, now time.Time) (provider.AcquireRequest, lease.Key) {
	t.Helper()
	return cloudtest.NewRequest(t, now, "multipass")
}

// labelFiles are the names of the label store's files.
func (e *env) labelFiles(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(e.labels.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range entries {
		out = append(out, de.Name())
	}
	return out
}

// checkEmpty fails unless the fake has no instance and no running box.
func checkEmpty(t *testing.T, e *env) {
	t.Helper()
	if in := e.fake.Instances(); len(in) != 0 {
		t.Errorf("instances left: %+v", in)
	}
	if r := e.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}

var leaseName = regexp.MustCompile(`crabbox-cbx-[0-9a-f]{12}`)

// events are the fake's mutations with the instance names as "instance".
func events(e *env) []string {
	var out []string
	for _, ev := range e.fake.Events() {
		out = append(out, leaseName.ReplaceAllString(ev, "instance"))
	}
	return out
}

// TestConformance runs the provider contract against the fake multipass,
// every instance a real SSH box booted from its cloud-config.
func TestConformance(t *testing.T) {
	providertest.RunSSHLease(t, providertest.Harness{
		NewBackend:       func(t *testing.T) provider.SSHLeaseBackend { return newEnv(t).backend(t) },
		IgnoreGoroutines: cloudtest.IgnoreGoroutines(),
	})
}

// TestAcquire: the launch as a multipass user expects it (name, size,
// image, cloud-init on stdin, nothing secret in the arguments), the
// labels on the host, the target, and a release without a trace.
func TestAcquire(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	name := tagcloud.Name(req.LeaseID)
	in := e.fake.Instances()
	if len(in) != 1 {
		t.Fatalf("instances %+v, want one", in)
	}
	got := fakemultipass.Instance{Name: in[0].Name, State: in[0].State, Image: in[0].Image, CPUs: in[0].CPUs, Memory: in[0].Memory, Disk: in[0].Disk}
	want := fakemultipass.Instance{Name: name, State: "Running", Image: "24.04", CPUs: 2, Memory: "2G", Disk: "10G"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instance (-want +got):\n%s", diff)
	}
	if !strings.HasPrefix(in[0].UserData, "#cloud-config\n") || !strings.Contains(in[0].UserData, multipass.ScriptPath) {
		t.Errorf("user data is not the cloud-config running the bootstrap: %.200q", in[0].UserData)
	}
	if !strings.Contains(in[0].UserData, `AllowUsers crabbox ubuntu\n`) {
		t.Error("the box's sshd does not let multipass's ubuntu in: multipass could not manage it")
	}
	cmds := e.run.commands()
	if diff := cmp.Diff([]string{"launch", "--name", name, "--cpus", "2", "--memory", "2G", "--disk", "10G",
		"--timeout", "1200", "--cloud-init", "-", "24.04"}, cmds[0]); diff != "" {
		t.Errorf("launch arguments (-want +got):\n%s", diff)
	}
	for _, c := range cmds {
		if s := strings.Join(c, " "); strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "ssh-ed25519") {
			t.Errorf("a key in the arguments: %s", s)
		}
	}
	if target.CloudID != name || target.User != cloud.DefaultUser || target.Labels[cloud.LabelLease] != req.LeaseID ||
		target.Labels[cloud.LabelState] != cloud.StateReady || target.Labels[cloud.LabelServerType] != "2cpu-2G-10G" || target.HostKey == "" {
		t.Errorf("target = %+v", target)
	}
	if diff := cmp.Diff([]string{name + ".json"}, e.labelFiles(t)); diff != "" {
		t.Errorf("label files (-want +got):\n%s", diff)
	}
	if err := b.ReleaseLease(t.Context(), provider.ReleaseRequest{Lease: target}); err != nil {
		t.Fatal(err)
	}
	checkEmpty(t, e)
	if f := e.labelFiles(t); len(f) != 0 {
		t.Errorf("label files left: %v", f)
	}
	if diff := cmp.Diff([]string{"launch instance", "delete instance"}, events(e)); diff != "" {
		t.Errorf("mutations (-want +got):\n%s", diff)
	}
}

// TestOthersInstancesUntouched: the user's own instances, one even named
// like crabbox's, are not listed, resolved or cleaned up.
func TestOthersInstancesUntouched(t *testing.T) {
	e := newEnv(t)
	e.fake.Add("primary")
	e.fake.Add("crabbox-cbx-0123456789ab")
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	all, err := b.List(t.Context(), provider.ListRequest{})
	if err != nil || len(all) != 1 || all[0].LeaseID != req.LeaseID {
		t.Fatalf("List = %+v, %v; want only the lease", all, err)
	}
	if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: "cbx_0123456789ab"}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of the user's crabbox-named instance: %v, want ErrNotFound", err)
	}
	ds, err := b.Cleanup(t.Context(), provider.CleanupRequest{Now: req.ExpiresAt.Add(48 * time.Hour), Claimed: func(string) bool { return true }})
	if err != nil || len(ds) != 1 || ds[0].LeaseID != req.LeaseID || !ds[0].Deleted {
		t.Fatalf("Cleanup = %+v, %v; want only the expired lease deleted", ds, err)
	}
	var left []string
	for _, in := range e.fake.Instances() {
		left = append(left, in.Name)
	}
	if diff := cmp.Diff([]string{"crabbox-cbx-0123456789ab", "primary"}, left); diff != "" {
		t.Errorf("instances left (-want +got):\n%s", diff)
	}
	_ = target
}

// TestSelfExpiry: at its TTL the box powers itself off; the stopped
// instance no longer resolves, and cleanup deletes it once expired.
func TestSelfExpiry(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	target, err := b.Acquire(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	e.fake.PowerOff(target.CloudID)
	if _, err := b.Resolve(t.Context(), provider.ResolveRequest{ID: req.LeaseID}); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Resolve of a stopped instance: %v, want ErrNotFound", err)
	}
	all, err := b.List(t.Context(), provider.ListRequest{})
	if err != nil || len(all) != 1 || all[0].State != "stopped" {
		t.Errorf("List = %+v, %v; want the stopped instance", all, err)
	}
	claimed := func(id string) bool { return id == req.LeaseID }
	ds, err := b.Cleanup(t.Context(), provider.CleanupRequest{Now: req.ExpiresAt.Add(-time.Minute), Claimed: claimed})
	if err != nil || len(ds) != 1 || ds[0].Delete {
		t.Fatalf("Cleanup before expiry = %+v, %v; want it kept", ds, err)
	}
	ds, err = b.Cleanup(t.Context(), provider.CleanupRequest{Now: req.ExpiresAt.Add(time.Minute), Claimed: claimed})
	if err != nil || len(ds) != 1 || !ds[0].Deleted {
		t.Fatalf("Cleanup after expiry = %+v, %v; want it deleted", ds, err)
	}
	checkEmpty(t, e)
}

// TestLaunchErrors: what multipass says about a failed launch becomes a
// clear error of the right kind, and a launch that made nothing leaves no
// labels.
func TestLaunchErrors(t *testing.T) {
	tests := []struct {
		name    string
		fault   fakemultipass.Fault
		wantErr error
		wantMsg string
	}{
		{"no such image", fakemultipass.Fault{Message: `launch failed: Unable to find an image matching "nope"`},
			provider.ErrPrecondition, `Unable to find an image matching "nope"`},
		{"timed out", fakemultipass.Fault{Code: 5, Message: "Timed out waiting for instance launch."},
			provider.ErrTransient, "Timed out waiting for instance launch."},
		{"no daemon", fakemultipass.Fault{Code: 3, Message: "launch failed: cannot connect to the multipass socket"},
			provider.ErrPrecondition, "cannot connect to the multipass socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.fake.SetFault("launch", tt.fault)
			req, _ := newRequest(t, time.Now())
			_, err := e.backend(t).Acquire(t.Context(), req)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Acquire = %v, want %v saying %q", err, tt.wantErr, tt.wantMsg)
			}
			if step, _ := cloud.FailedStep(err); step != cloud.StepCreate {
				t.Errorf("failed step %q, want %q", step, cloud.StepCreate)
			}
			checkEmpty(t, e)
			if f := e.labelFiles(t); len(f) != 0 {
				t.Errorf("label files left: %v", f)
			}
		})
	}
}

// TestHalfwayLaunchRolledBack: a launch that made the instance but
// failed waiting for it (stopped, no address) deletes it again.
func TestHalfwayLaunchRolledBack(t *testing.T) {
	e := newEnv(t)
	e.fake.SetFault("launch", fakemultipass.Fault{Halfway: true})
	req, _ := newRequest(t, time.Now())
	_, err := e.backend(t).Acquire(t.Context(), req)
	if !errors.Is(err, provider.ErrTransient) || !strings.Contains(err.Error(), "timed out waiting for initialization") {
		t.Errorf("Acquire = %v, want the launch's timeout", err)
	}
	checkEmpty(t, e)
	if f := e.labelFiles(t); len(f) != 0 {
		t.Errorf("label files left: %v", f)
	}
	if diff := cmp.Diff([]string{"launch instance", "delete instance"}, events(e)); diff != "" {
		t.Errorf("mutations (-want +got):\n%s", diff)
	}
}

// TestSpec: the options, no credentials, the aliases.
func TestSpec(t *testing.T) {
	s := multipass.Provider{}.Spec()
	var names []string
	for _, o := range s.Options {
		names = append(names, o.Name)
		if o.Flag != "multipass-"+o.Name {
			t.Errorf("option %s has flag %s", o.Name, o.Flag)
		}
	}
	want := []string{"cpus", "memory", "disk", "image", "launch-timeout", "endpoint", "prepared", "work-root", "owner", "boot-timeout"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("options (-want +got):\n%s", diff)
	}
	if len(s.Credentials) != 0 || s.Kind != provider.KindSSHLease || !slices.Equal(s.Aliases, []string{"mp", "canonical-multipass"}) {
		t.Errorf("spec = %+v", s)
	}
	if s.Has(provider.FeatureSelfExpiry) {
		t.Error("self-expiry claimed, but a stopped instance keeps its disk")
	}
}

// TestConfigure: bad options are refused, naming the option; the
// defaults are multipass's usual ones; the label store needs a state
// directory.
func TestConfigure(t *testing.T) {
	rt := provider.Runtime{StateDir: t.TempDir()}
	spec := multipass.Provider{}.Spec()
	tests := []struct {
		opt, value, wantErr string
	}{
		{"cpus", "two", "option cpus"},
		{"cpus", "0", "option cpus"},
		{"memory", "8", "option memory"},
		{"memory", "256M", "option memory"},
		{"memory", "lots", "option memory"},
		{"disk", "512M", "option disk"},
		{"disk", "-1G", "option disk"},
		{"image", "--help", "option image"},
		{"image", "24.04; rm -rf /", "option image"},
		{"endpoint", "-v", "option endpoint"},
		{"launch-timeout", "soon", "option launch-timeout"},
		{"launch-timeout", "10s", "option launch-timeout"},
		{"work-root", "work", "option work-root"},
		{"boot-timeout", "x", "boot-timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.opt+"="+tt.value, func(t *testing.T) {
			cfg, err := spec.Resolve(provider.Config{tt.opt: tt.value})
			if err == nil {
				_, err = multipass.Provider{}.Configure(cfg, rt)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
	cfg, err := spec.Resolve(provider.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (multipass.Provider{}).Configure(cfg, provider.Runtime{}); err == nil || !strings.Contains(err.Error(), "StateDir") {
		t.Errorf("Configure without a state directory: %v", err)
	}
	b, err := multipass.Provider{}.Configure(cfg, rt)
	if err != nil || b == nil {
		t.Fatalf("Configure with the defaults: %v", err)
	}
	for _, ok := range []string{"8G", "512M", "1.5G", "1024MiB", "4GB"} {
		if _, err := multipass.New(multipass.Config{Memory: ok}, rt); err != nil {
			t.Errorf("memory %s: %v", ok, err)
		}
	}
}

// TestDoctor: the program's and the daemon's versions, and what is
// wrong when either is missing.
func TestDoctor(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(e *env)
		wantOK []bool
		want   string
	}{
		{"fine", func(*env) {}, []bool{true, true, true}, "1.16.1"},
		{"no program", func(e *env) { e.cfg.Binary = "/nowhere/multipass" }, []bool{false}, "install multipass"},
		{"no daemon", func(e *env) { e.fake.SetNoDaemon() }, []bool{true, false}, "is it running"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			tt.setup(e)
			checks, err := e.backend(t).Doctor(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			var ok []bool
			var text []string
			for _, c := range checks {
				ok = append(ok, c.OK)
				text = append(text, c.Name+": "+c.Detail)
			}
			if diff := cmp.Diff(tt.wantOK, ok); diff != "" || !strings.Contains(strings.Join(text, "\n"), tt.want) {
				t.Errorf("checks %q (-want +got OK):\n%s", text, diff)
			}
		})
	}
}

// TestRealRunner: through os/exec, as crabbox runs multipass, the exit
// code and message of a failed command give its error.
func TestRealRunner(t *testing.T) {
	t.Setenv(programEnv, "1")
	b, err := multipass.New(multipass.Config{Binary: os.Args[0]}, provider.Runtime{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	checks, err := b.Doctor(t.Context())
	if err != nil || len(checks) != 3 || !checks[0].OK || !checks[1].OK || !checks[2].OK {
		t.Errorf("Doctor = %+v, %v", checks, err)
	}
	lease := provider.LeaseTarget{LeaseID: "cbx_0123456789ab", CloudID: "crabbox-cbx-0123456789ab"}
	_, err = b.Touch(t.Context(), provider.TouchRequest{Lease: lease, Now: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
	var cerr *multipass.CLIError
	if !errors.Is(err, provider.ErrNotFound) || !errors.As(err, &cerr) || cerr.Code != 2 ||
		cerr.Message != `info failed: instance "crabbox-cbx-0123456789ab" does not exist` {
		t.Errorf("Touch of a missing instance = %v (%+v), want ErrNotFound with multipass's message and exit code 2", err, cerr)
	}
}

// CheckConfig refuses, before any lease is recorded, a machine whose
// multipass program or daemon is missing, naming what to do.
func TestCheckConfig(t *testing.T) {
	tests := []struct {
		name  string
		setup func(e *env)
		want  string
	}{
		{"fine", func(*env) {}, ""},
		{"no program", func(e *env) { e.cfg.Binary = "/nowhere/multipass" }, "install multipass"},
		{"no daemon", func(e *env) { e.fake.SetNoDaemon() }, "the multipass daemon does not answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			tt.setup(e)
			err := e.backend(t).CheckConfig(t.Context())
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckConfig: %v", err)
			case tt.want != "" && (!errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckConfig = %v, want a precondition error saying %q", err, tt.want)
			}
		})
	}
}
