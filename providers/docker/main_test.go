package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

// helperEnv makes the test binary act as a CLI that dies mid-acquire
// (see TestKilledAcquireIsCleanedUp).
const helperEnv = "CRABBOX_DOCKER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runAcquireHelper())
	}
	testenv.Main(m, fixture.teardown, engineTests)
}

// engineTests are the tests that need a docker engine and busybox.
var engineTests = &testenv.Group{Name: "docker engine", Enable: "bash .ci/setup.d/10-docker.sh, as root"}

// testFixture is what the engine tests share: a static agent built from
// this module and a tiny box image, both made once per test binary.
type testFixture struct {
	once  sync.Once
	skip  string // why engine tests cannot run; empty when they can
	err   error
	dir   string
	agent string // static linux agent executable
	image string // the test box image's tag
}

var fixture testFixture

// engine returns the shared fixture, or skips the test with the reason
// when no engine answers (failing instead when CI=true).
func engine(t *testing.T) *testFixture {
	t.Helper()
	fixture.once.Do(fixture.setup)
	if fixture.err != nil {
		t.Fatalf("docker test fixture: %v", fixture.err)
	}
	if fixture.skip != "" {
		engineTests.Skip(t, fixture.skip)
	}
	return &fixture
}

func (f *testFixture) setup() {
	cli, err := eng.New(eng.ConfigFromEnv(os.Getenv))
	if err != nil {
		f.skip = fmt.Sprintf("no docker client: %v", err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		f.skip = fmt.Sprintf("no docker engine answers at %s: %v", cli.Host(), err)
		return
	}
	if v.Os != "linux" {
		f.skip = fmt.Sprintf("the engine runs %s containers", v.Os)
		return
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		f.skip = "no busybox (busybox-static) for the test box image"
		return
	}
	if err := checkAgent(busybox, v.Arch); err != nil {
		f.skip = fmt.Sprintf("busybox %s cannot run in a scratch image (%v); install busybox-static", busybox, err)
		return
	}
	if f.dir, err = os.MkdirTemp("", "crabbox-docker-test-"); err != nil {
		f.err = err
		return
	}
	f.agent = filepath.Join(f.dir, "crabbox")
	build := exec.CommandContext(ctx, "go", "build", "-o", f.agent, "./internal/agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+v.Arch)
	if out, err := build.CombinedOutput(); err != nil {
		f.err = fmt.Errorf("build the test agent: %v\n%s", err, out)
		return
	}
	rootfs, err := busyboxRootFS(busybox)
	if err != nil {
		f.err = err
		return
	}
	b, err := New(Config{}, provider.Runtime{})
	if err != nil {
		f.err = err
		return
	}
	defer b.Close()
	f.image = fmt.Sprintf("crabbox-test/busybox:%d", os.Getpid())
	if _, err := b.ImportImage(ctx, bytes.NewReader(rootfs), f.image); err != nil {
		f.err = err
	}
}

func (f *testFixture) teardown() error {
	var errs []string
	if f.image != "" {
		cli, err := eng.New(eng.ConfigFromEnv(os.Getenv))
		if err == nil {
			err = cli.ImageRemove(context.Background(), f.image, eng.ImageRemoveOptions{Force: true, PruneChildren: true})
			_ = cli.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("remove image %s: %v", f.image, err))
		}
	}
	if f.dir != "" {
		if err := os.RemoveAll(f.dir); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// busyboxRootFS is a tar stream of a root filesystem holding only a static
// busybox and links for its applets (sh, tar, sha256sum, setsid, ...: what
// sync and run use on a box), /tmp and a passwd for id.
func busyboxRootFS(busybox string) ([]byte, error) {
	bin, err := os.ReadFile(busybox)
	if err != nil {
		return nil, err
	}
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("busybox --list: %w", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	add := func(h *tar.Header, data []byte) {
		h.ModTime = now
		if err == nil {
			err = tw.WriteHeader(h)
		}
		if err == nil && len(data) > 0 {
			_, err = tw.Write(data)
		}
	}
	for _, d := range []string{"bin", "etc", "root", "tmp"} {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		add(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}, nil)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin))}, bin)
	for applet := range strings.FieldsSeq(string(list)) {
		if applet != "busybox" {
			add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777}, nil)
		}
	}
	passwd := []byte("root:x:0:0:root:/root:/bin/sh\n")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: int64(len(passwd))}, passwd)
	group := []byte("root:x:0:\n")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/group", Mode: 0o644, Size: int64(len(group))}, group)
	osRelease := []byte("NAME=\"crabbox test box\"\nID=busybox\n")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/os-release", Mode: 0o644, Size: int64(len(osRelease))}, osRelease)
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("busybox root filesystem: %w", err)
	}
	return buf.Bytes(), nil
}

// testLogger logs to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// newBackend returns a backend on the test image and agent, with its own
// state directory, closed when the test ends.
func newBackend(t *testing.T, f *testFixture) *Backend {
	t.Helper()
	return newBackendWith(t, Config{Image: f.image, Agent: f.agent, StateDir: t.TempDir()})
}

// newBackendWith returns a backend for cfg, closed when the test ends
// (after the cleanups the test registers later, which may still use it).
func newBackendWith(t *testing.T, cfg Config) *Backend {
	t.Helper()
	b, err := New(cfg, provider.Runtime{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// removeLeftovers removes every container of lease id when the test ends,
// whatever the test did.
func removeLeftovers(t *testing.T, b *Backend, id string) {
	t.Cleanup(func() {
		if err := b.ReleaseLease(context.Background(), provider.ReleaseRequest{Lease: provider.LeaseTarget{LeaseID: id}}); err != nil {
			t.Errorf("remove the containers of lease %s: %v", id, err)
		}
	})
}
