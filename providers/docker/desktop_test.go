package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/internal/rfb"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
	"github.com/crabbox-dev/crabbox/run"
)

// desktopTests need the desktop image 50-desktop-image.sh builds.
var desktopTests = &testenv.Group{Name: "docker desktop", Enable: "bash .ci/setup.d/50-desktop-image.sh, as root"}

// testDesktopImage is the desktop image 50-desktop-image.sh builds.
const testDesktopImage = "crabbox-test/desktop:latest"

// desktopImage skips the test (fails it in CI) when the engine has no
// desktop image.
func desktopImage(t *testing.T) string {
	t.Helper()
	cli, err := eng.New(eng.ConfigFromEnv(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	img, err := cli.ImageInspect(t.Context(), testDesktopImage)
	if eng.IsNotFound(err) {
		desktopTests.Skip(t, "no "+testDesktopImage+" image on the engine")
	}
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.Labels[labelDesktopImage] != "true" {
		t.Fatalf("image %s has no desktop label", testDesktopImage)
	}
	return testDesktopImage
}

// Known colours the tests paint the desktop with.
var (
	rootColour   = color.RGBA{0x1e, 0x90, 0xff, 0xff} // xsetroot -solid '#1e90ff'
	windowColour = color.RGBA{0xff, 0x88, 0x00, 0xff} // an xterm with background #ff8800
)

// paintDesktop paints the root window rootColour and opens an xterm
// window of windowColour at (100, 100), and returns once it is mapped.
const paintDesktop = `xsetroot -solid '#1e90ff' &&
setsid xterm -title crabbox-test -geometry 30x10+100+100 -bg '#ff8800' -fg '#ff8800' -e sleep 600 </dev/null >/dev/null 2>&1 &
for i in $(seq 100); do xwininfo -name crabbox-test 2>/dev/null | grep -q IsViewable && exit 0; sleep 0.1; done; exit 1`

// A lease asked for with a desktop gets a box whose screen crabbox
// screenshot takes: the colours and the window painted on it are in the
// PNG.
func TestDesktopScreenshot(t *testing.T) {
	f := engine(t)
	image := desktopImage(t)
	b := newBackendWith(t, Config{Image: f.image, DesktopImage: image, Agent: f.agent, StateDir: t.TempDir()})
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()), crabbox.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	plain, err := c.Acquire(ctx, crabbox.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	removeLeftovers(t, b, plain.ID())
	if err := plain.Screenshot(ctx, &bytes.Buffer{}); !errors.Is(err, crabbox.ErrNoDesktop) {
		t.Errorf("Screenshot of a box without a desktop = %v, want ErrNoDesktop", err)
	}
	if err := plain.Release(ctx); err != nil {
		t.Error(err)
	}

	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Desktop: true})
	if err != nil {
		t.Fatal(err)
	}
	removeLeftovers(t, b, l.ID())
	defer l.Release(context.WithoutCancel(ctx))
	if !l.Desktop() {
		t.Error("a lease acquired with Desktop says it has none")
	}
	var out bytes.Buffer
	res, err := l.Exec(ctx, run.Command{Shell: paintDesktop, Stdout: &out, Stderr: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("paint the desktop: exit %d, %v\n%s", res.ExitCode, err, &out)
	}
	var shot bytes.Buffer
	if err := l.Screenshot(ctx, &shot); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.ArtifactDir(), "desktop.png")
	_ = os.WriteFile(file, shot.Bytes(), 0o644)
	img, err := png.Decode(&shot)
	if err != nil {
		t.Fatalf("the screenshot is no PNG: %v", err)
	}
	checkDesktop(t, img, file)

	// A VNC viewer pointed at ServeVNC's listener sees the same desktop.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- l.ServeVNC(sctx, ln) }()
	viewer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tunnelled, err := rfb.Screenshot(ctx, viewer)
	if err != nil {
		t.Fatalf("screenshot through ServeVNC: %v", err)
	}
	checkDesktop(t, tunnelled, "the tunnel")
	stop()
	if err := <-served; err != nil {
		t.Errorf("ServeVNC after its context ended = %v, want nil", err)
	}
	if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("ServeVNC's listener still accepts after it returned")
	}
}

// checkDesktop checks that img shows what paintDesktop painted.
func checkDesktop(t *testing.T, img image.Image, file string) {
	t.Helper()
	if got := img.Bounds(); got != image.Rect(0, 0, 1280, 800) {
		t.Errorf("screen %v, want 1280x800", got)
	}
	for _, p := range []struct {
		x, y int
		want color.RGBA
		what string
	}{
		{10, 10, rootColour, "the root window"},
		{1200, 700, rootColour, "the root window"},
		{100 + 90, 100 + 70, windowColour, "the xterm window"},
		{100 + 30, 100 + 100, windowColour, "the xterm window"},
	} {
		if got := color.RGBAModel.Convert(img.At(p.x, p.y)).(color.RGBA); got != p.want {
			t.Errorf("pixel (%d, %d) of %s = %v, want %v (see %s)", p.x, p.y, p.what, got, p.want, file)
		}
	}
}

// A desktop lease on an image without a desktop is refused before any
// container is made.
func TestDesktopNeedsDesktopImage(t *testing.T) {
	f := engine(t)
	b := newBackendWith(t, Config{Image: f.image, DesktopImage: f.image, Agent: f.agent, StateDir: t.TempDir()})
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Acquire(t.Context(), crabbox.AcquireOptions{Desktop: true})
	if err == nil || !strings.Contains(err.Error(), "has no desktop") {
		t.Fatalf("Acquire = %v, want the image refused", err)
	}
	id := regexp.MustCompile(`cbx_[0-9a-f]{12}`).FindString(err.Error())
	if id == "" {
		t.Fatalf("the error %q names no lease", err)
	}
	boxes, err := b.boxes(t.Context(), labelLease+"="+id)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range boxes {
		t.Errorf("container %s left behind", x.name)
	}
}

// The CLI on a desktop box: warmup --desktop, a run that paints the
// desktop, screenshot into a PNG file, and vnc's tunnel, which a VNC
// client reaches at the address it prints until it is interrupted.
func TestDesktopCLI(t *testing.T) {
	f := engine(t)
	desktop := desktopImage(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "crabbox")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/crabbox").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/crabbox: %v\n%s", err, out)
	}
	env := append(os.Environ(),
		"CRABBOX_STATE_DIR="+t.TempDir(), "CRABBOX_CONFIG="+filepath.Join(t.TempDir(), "none"), "XDG_CONFIG_HOME="+t.TempDir(),
		"CRABBOX_PROVIDER=docker", "CRABBOX_DOCKER_AGENT="+f.agent, "CRABBOX_DOCKER_IMAGE="+f.image, "CRABBOX_DOCKER_DESKTOP_IMAGE="+desktop)
	crabbox := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env, cmd.Dir = env, t.TempDir()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("crabbox %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
		}
		return stdout.String()
	}
	var warm struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal([]byte(crabbox("warmup", "--desktop", "--json")), &warm); err != nil {
		t.Fatal(err)
	}
	b := newBackendWith(t, Config{Image: f.image, Agent: f.agent})
	removeLeftovers(t, b, warm.ID)
	defer crabbox("stop", warm.ID)
	crabbox("run", "--quiet", "--no-sync", "--id", warm.ID, "--shell", paintDesktop)

	file := filepath.Join(t.TempDir(), "screen.png")
	crabbox("screenshot", warm.ID, file)
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("crabbox screenshot wrote no PNG: %v", err)
	}
	checkDesktop(t, img, file)

	vnc := exec.CommandContext(ctx, bin, "vnc", "--json", warm.ID)
	vnc.Env, vnc.Dir = env, t.TempDir()
	var stderr bytes.Buffer
	vnc.Stderr = &stderr
	stdout, err := vnc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := vnc.Start(); err != nil {
		t.Fatal(err)
	}
	var tunnel struct{ Lease, Address, URL string }
	if err := json.NewDecoder(stdout).Decode(&tunnel); err != nil {
		_ = vnc.Process.Kill()
		_ = vnc.Wait()
		t.Fatalf("crabbox vnc printed no address: %v\n%s", err, &stderr)
	}
	viewer, err := net.Dial("tcp", tunnel.Address)
	if err == nil {
		var shot *image.RGBA
		if shot, err = rfb.Screenshot(ctx, viewer); err == nil {
			checkDesktop(t, shot, "the tunnel of crabbox vnc")
		}
	}
	if err != nil {
		t.Errorf("a VNC client at %s (%s): %v", tunnel.Address, tunnel.URL, err)
	}
	if tunnel.Lease != warm.ID || tunnel.URL != "vnc://"+tunnel.Address {
		t.Errorf("crabbox vnc --json = %+v", tunnel)
	}
	_ = vnc.Process.Signal(os.Interrupt)
	if err := vnc.Wait(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 130 {
			t.Errorf("crabbox vnc after Ctrl-C: %v\n%s", err, &stderr)
		}
	}
}

// A desktop box whose desktop does not start (here: an image labelled as
// a desktop image without the start script) fails the acquire, which
// says why and removes its container.
func TestDesktopStartFailureLeavesNothing(t *testing.T) {
	f := engine(t)
	broken := f.image + "-broken-desktop"
	rootfs, err := busyboxRootFS(mustLookPath(t, "busybox"))
	if err != nil {
		t.Fatal(err)
	}
	b := newBackendWith(t, Config{Image: f.image, DesktopImage: broken, Agent: f.agent, StateDir: t.TempDir()})
	if _, err := b.importImage(t.Context(), bytes.NewReader(rootfs), broken, append(slices.Clone(imageChanges), "LABEL "+labelDesktopImage+"=true")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.cli.ImageRemove(context.Background(), broken, eng.ImageRemoveOptions{Force: true}); err != nil {
			t.Errorf("remove image %s: %v", broken, err)
		}
	})
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Acquire(t.Context(), crabbox.AcquireOptions{Desktop: true})
	if err == nil || !strings.Contains(err.Error(), "did not get ready") {
		t.Fatalf("Acquire = %v, want the box's failed start", err)
	}
	id := regexp.MustCompile(`cbx_[0-9a-f]{12}`).FindString(err.Error())
	if id == "" {
		t.Fatalf("the error %q names no lease", err)
	}
	boxes, err := b.boxes(t.Context(), labelLease+"="+id)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range boxes {
		t.Errorf("container %s left behind", x.name)
	}
}

func mustLookPath(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A checkpoint of a desktop box forks into a desktop box; a checkpoint
// of a plain box refuses to fork into one before any container is made.
func TestDesktopFork(t *testing.T) {
	f := engine(t)
	desktop := desktopImage(t)
	b := newBackendWith(t, Config{Image: f.image, DesktopImage: desktop, Agent: f.agent, StateDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	desktopReq := func() provider.AcquireRequest {
		req := acquireRequest(t, time.Hour)
		req.Labels = map[string]string{provider.DesktopLabel: "true"}
		removeLeftovers(t, b, req.LeaseID)
		return req
	}
	req := desktopReq()
	src, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	a := checkpointOf(t, ctx, b, src, nil)
	fork, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: desktopReq(), Artifact: a})
	if err != nil {
		t.Fatalf("fork a desktop box's checkpoint into a desktop box: %v", err)
	}
	if fork.Labels[provider.DesktopLabel] != "true" {
		t.Errorf("the fork's labels %v lack %s=true", fork.Labels, provider.DesktopLabel)
	}

	plain := acquireBox(t, ctx, b, "plain-source")
	pa := checkpointOf(t, ctx, b, plain, nil)
	again := desktopReq()
	if _, err := b.Fork(ctx, provider.ForkRequest{AcquireRequest: again, Artifact: pa}); !errors.Is(err, provider.ErrPrecondition) || !strings.Contains(err.Error(), "not made of a desktop box") {
		t.Errorf("fork a plain checkpoint into a desktop box = %v, want it refused", err)
	}
	if boxes, err := b.boxes(ctx, labelLease+"="+again.LeaseID); err != nil || len(boxes) != 0 {
		t.Errorf("containers of the refused fork: %v, %v", boxes, err)
	}
}
