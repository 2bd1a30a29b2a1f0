package aws_test

import (
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/internal/logbuf"
	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// Fake credentials: the secret must never show up anywhere.
const (
	fakeAccessKey = "AKIAFAKEFAKEFAKE0001"
	fakeSecret    = "fake-secret-0123456789-do-not-leak"
	region        = "us-east-1"
	sshCIDR       = "203.0.113.0/24"
)

// world is a fake EC2 whose instances boot fake boxes (crabbox's SSH
// server on loopback) from their user data.
type world struct {
	ec2   *fakeec2.Server
	url   string
	fleet *cloudtest.Fleet
	logs  *logbuf.Buffer
	disks *disks // nil: every box's files are the configured work root
}

func newWorld(t *testing.T) *world { return newWorldOf(t, cloudtest.NewFleet(t)) }

// newWorldOf is newWorld with the instances' boxes served by fleet.
func newWorldOf(t *testing.T, fleet *cloudtest.Fleet) *world {
	t.Helper()
	fake, url := fakeec2.Start(t)
	fake.SetPendingDescribes(0)
	w := &world{ec2: fake, url: url, fleet: fleet, logs: &logbuf.Buffer{}}
	fake.SetHooks(fakeec2.Hooks{
		Launch: func(in fakeec2.Instance) (string, error) {
			userData, err := w.disks.attach(fake, in)
			if err != nil {
				return "", err
			}
			ip := fleet.NewAddress()
			return ip, fleet.Boot(ip, userData)
		},
		Terminate: func(in fakeec2.Instance) { _ = fleet.Halt(in.Address) },
		Image:     func(in fakeec2.Instance, imageID string) error { return w.disks.image(in, imageID) },
	})
	return w
}

// newDiskWorld is newWorld whose instances each have a disk of their own
// (see disks), which images copy.
func newDiskWorld(t *testing.T) *world {
	w := newWorld(t)
	w.disks = &disks{dir: t.TempDir()}
	return w
}

// disks model instances' root volumes. A fake box's files are the host's,
// under its work root, so two boxes of one backend (one work root) would
// share them. With disks, each instance's work root is a directory of its
// own, <dir>/instances/<id>, which the fake reports in the instance's
// work_root tag (the only liberty it takes with the provider's tags); an
// image is a copy of that directory, and an instance launched from it
// starts with a copy of the copy.
type disks struct{ dir string }

// attach gives the instance its disk, from its image when it has one of
// the fake's own, and returns the user data its box boots with.
func (d *disks) attach(fake *fakeec2.Server, in fakeec2.Instance) (string, error) {
	if d == nil {
		return in.UserData, nil
	}
	bs, err := cloud.ParseUserData(in.UserData)
	if err != nil {
		return "", err
	}
	root := filepath.Join(d.dir, "instances", in.ID)
	if src := filepath.Join(d.dir, "images", in.ImageID); fileExists(src) {
		err = os.CopyFS(root, os.DirFS(src))
	} else {
		err = os.MkdirAll(root, 0o755)
	}
	if err != nil {
		return "", err
	}
	bs.WorkRoot = root
	fake.SetTags(in.Region, in.ID, map[string]string{"work_root": root})
	return bs.UserData()
}

// image copies the instance's disk as the image's.
func (d *disks) image(in fakeec2.Instance, imageID string) error {
	if d == nil {
		return nil
	}
	return os.CopyFS(filepath.Join(d.dir, "images", imageID), os.DirFS(filepath.Join(d.dir, "instances", in.ID)))
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// config is a backend configuration that talks only to the fake.
func (w *world) config(t *testing.T) aws.Config {
	return aws.Config{
		Regions:     []string{region},
		SSHCIDR:     sshCIDR,
		WorkRoot:    t.TempDir(),
		Owner:       "tester",
		Endpoint:    w.url,
		Credentials: credentials.NewStaticCredentialsProvider(fakeAccessKey, fakeSecret, ""),
		MapAddress:  w.fleet.MapAddress,
	}
}

// runtime is a runtime logging into w.logs, with its own HTTP transport
// whose idle connections close when the test ends.
func (w *world) runtime(t *testing.T, clock clockwork.Clock) provider.Runtime {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return provider.Runtime{
		Clock:      clock,
		HTTPClient: &http.Client{Transport: tr},
		Logger:     slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func (w *world) backend(t *testing.T, edit ...func(*aws.Config)) *aws.Backend {
	t.Helper()
	return w.backendWithClock(t, clockwork.NewRealClock(), edit...)
}

func (w *world) backendWithClock(t *testing.T, clock clockwork.Clock, edit ...func(*aws.Config)) *aws.Backend {
	t.Helper()
	cfg := w.config(t)
	for _, e := range edit {
		e(&cfg)
	}
	b, err := aws.New(cfg, w.runtime(t, clock))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// request is an acquire request with a fresh lease identity and key.
func request(t *testing.T) provider.AcquireRequest {
	t.Helper()
	key, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Second)
	return provider.AcquireRequest{
		LeaseID: lease.NewID(), Slug: "test-crab", PublicKey: key.AuthorizedKey(),
		TTL: lease.DefaultTTL, IdleTimeout: lease.DefaultIdleTimeout,
		CreatedAt: now, ExpiresAt: now.Add(lease.DefaultIdleTimeout),
		Labels: map[string]string{"suite": "aws"},
	}
}

// checkNothingLeft fails unless the fake region has no live instance, no
// key pair, no crabbox security group and no running box.
func (w *world) checkNothingLeft(t *testing.T) {
	t.Helper()
	if in := w.ec2.Instances(region); len(in) != 0 {
		t.Errorf("instances left: %+v", in)
	}
	if k := w.ec2.KeyPairs(region); len(k) != 0 {
		t.Errorf("key pairs left: %+v", k)
	}
	if g := w.ec2.SecurityGroups(region); len(g) != 0 {
		t.Errorf("security groups left: %+v", g)
	}
	if v := w.ec2.Volumes(region); len(v) != 0 {
		t.Errorf("volumes left: %+v", v)
	}
	if r := w.fleet.Running(); len(r) != 0 {
		t.Errorf("boxes still running: %v", r)
	}
}

// actions are the names of the state-changing calls the fake received.
func (w *world) actions() []string {
	var out []string
	for _, c := range w.ec2.Calls() {
		if !isDescribe(c.Action) {
			out = append(out, c.Action)
		}
	}
	return out
}

func isDescribe(action string) bool { return len(action) > 8 && action[:8] == "Describe" }

func releaseOf(t provider.LeaseTarget) provider.ReleaseRequest {
	return provider.ReleaseRequest{Lease: t}
}
