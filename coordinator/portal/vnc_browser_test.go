package portal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/internal/handover"
	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/docker"
	"github.com/crabbox-dev/crabbox/run"
)

// desktopTests need a docker engine and the desktop image
// 50-desktop-image.sh builds.
var desktopTests = &testenv.Group{Name: "portal desktop", Enable: "bash .ci/setup.d/10-docker.sh and .ci/setup.d/50-desktop-image.sh, as root"}

// testDesktopImage is the desktop image 50-desktop-image.sh builds.
const testDesktopImage = "crabbox-test/desktop:latest"

// paintDesktop paints the root window #1e90ff and opens an #ff8800 xterm
// at (100, 100), and returns once it is mapped. The xterm reads a line
// and paints the root window the colour typed (#RRGGBB without #).
const paintDesktop = `xsetroot -solid '#1e90ff' &&
setsid xterm -title crabbox-test -geometry 30x10+100+100 -bg '#ff8800' -fg '#ff8800' -e sh -c 'read c && xsetroot -solid "#$c"; sleep 600' </dev/null >/dev/null 2>&1 &
for i in $(seq 100); do xwininfo -name crabbox-test 2>/dev/null | grep -q IsViewable && exit 0; sleep 0.1; done; exit 1`

// desktopLease acquires a docker desktop box, paints it, and returns it;
// it is released when the test ends.
func desktopLease(t *testing.T) *crabbox.Lease {
	t.Helper()
	if _, err := os.Stat("/var/run/docker.sock"); err != nil && os.Getenv("DOCKER_HOST") == "" {
		desktopTests.Skip(t, "no docker engine")
	}
	if runtime.GOOS != "linux" {
		desktopTests.Skip(t, "docker boxes need linux")
	}
	agent := filepath.Join(t.TempDir(), "agent")
	build := exec.Command("go", "build", "-o", agent, "github.com/crabbox-dev/crabbox/providers/docker/internal/agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the box agent: %v\n%s", err, out)
	}
	b, err := docker.New(docker.Config{DesktopImage: testDesktopImage, Agent: agent, StateDir: t.TempDir()}, provider.Runtime{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c, err := crabbox.New(crabbox.WithBackend(b), crabbox.WithStateDir(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := b.CheckConfig(ctx); err != nil {
		desktopTests.Skip(t, fmt.Sprintf("no docker engine answers: %v", err))
	}
	l, err := c.Acquire(ctx, crabbox.AcquireOptions{Desktop: true})
	if err != nil {
		if errors.Is(err, provider.ErrPrecondition) {
			desktopTests.Skip(t, fmt.Sprintf("no desktop box: %v", err))
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("release the desktop box: %v", err)
		}
	})
	res, err := l.Exec(ctx, run.Command{Shell: paintDesktop})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("paint the desktop: exit %d, %v", res.ExitCode, err)
	}
	return l
}

// A signed-in user opens a desktop lease's page, follows its Desktop
// link and sees the box's desktop in the WebVNC canvas (the root
// window's colour and the xterm window painted on the box), then clicks
// into the xterm and types a colour, which the xterm paints the root
// window with: the canvas shows it.
func TestWebVNCInBrowser(t *testing.T) {
	ctx := headless(t)
	l := desktopLease(t)
	s := newSite(t, false)
	alice := s.token("alice", "acme")
	target := l.Target()
	reg, err := s.api(alice).Register(t.Context(), l.ID(), api.RegistrationRequest{
		Provider: "docker", Host: target.Host, SSHPort: strconv.Itoa(target.Port), SSHUser: target.User,
		SSHHostKey: target.HostKey, Labels: map[string]string{provider.DesktopLabel: "true"},
	})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := l.SSH(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := handover.SetKey(t.Context(), conn, accessKey(t, reg.ID).PublicKey()); err != nil {
		t.Fatalf("install the coordinator's access key on the box: %v", err)
	}

	step(t, ctx, "sign in",
		chromedp.Navigate(s.url+"/portal/login"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", alice),
		chromedp.Click("#signin"),
		chromedp.WaitVisible("#leases"),
	)
	step(t, ctx, "open the desktop",
		chromedp.Navigate(s.url+"/portal/leases/"+l.ID()),
		chromedp.WaitVisible("#desktop"),
		chromedp.Click("#desktop"),
		chromedp.WaitVisible("#screen"),
		framesDrawn(),
		textContains("#vnc-status", "Connected"),
	)
	pixel := func(x, y int) [4]int {
		t.Helper()
		px, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](fmt.Sprintf(
			`Array.from(document.querySelector("#screen").getContext("2d").getImageData(%d, %d, 1, 1).data)`, x, y)))
		if err != nil || len(px) != 4 {
			t.Fatalf("read pixel (%d, %d) of the canvas: %v, %v", x, y, px, err)
		}
		return [4]int(px)
	}
	size, err := chromedp.Run(ctx, chromedp.Evaluate[[]int](`[document.querySelector("#screen").width, document.querySelector("#screen").height]`))
	if err != nil || len(size) != 2 || size[0] != 1280 || size[1] != 800 {
		t.Errorf("canvas size = %v (%v), want the box's 1280x800 screen", size, err)
	}
	for _, p := range []struct {
		x, y int
		want [4]int
		what string
	}{
		{10, 10, [4]int{0x1e, 0x90, 0xff, 255}, "the root window"},
		{1200, 700, [4]int{0x1e, 0x90, 0xff, 255}, "the root window"},
		{190, 170, [4]int{0xff, 0x88, 0x00, 255}, "the xterm window"},
	} {
		if got := pixel(p.x, p.y); got != p.want {
			t.Errorf("canvas pixel (%d, %d) of %s = %v, want %v", p.x, p.y, p.what, got, p.want)
		}
	}

	// The pointer over the xterm gives it the keyboard (no window
	// manager: focus follows the pointer); what is typed reaches it.
	box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => { const r = document.querySelector("#screen").getBoundingClientRect(); return [r.left, r.top, r.width / 1280]; })()`))
	if err != nil || len(box) != 3 {
		t.Fatalf("canvas position: %v, %v", box, err)
	}
	step(t, ctx, "type into the desktop",
		chromedp.MouseClickXY(box[0]+190*box[2], box[1]+170*box[2]),
		chromedp.SendKeys("#screen", "00ff00\r"),
		canvasPixel(10, 10, [4]int{0, 0xff, 0, 255}),
	)

	if shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		file := filepath.Join(t.ArtifactDir(), "webvnc.png")
		if os.WriteFile(file, shot, 0o644) == nil {
			t.Logf("the page: %s", file)
		}
	}
}

// framesDrawn waits until the WebVNC canvas has drawn a whole frame.
func framesDrawn() chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](`Number(document.querySelector("#screen").dataset.frames || 0) >= 1`,
		chromedp.WithPollingInterval(100*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := poll(ctx, t)
		return err
	})
}

// canvasPixel waits until the WebVNC canvas's pixel (x, y) is want.
func canvasPixel(x, y int, want [4]int) chromedp.Action[chromedp.Void] {
	poll := chromedp.Poll[bool](fmt.Sprintf(`(() => { const d = document.querySelector("#screen").getContext("2d").getImageData(%d, %d, 1, 1).data; return d[0] === %d && d[1] === %d && d[2] === %d && d[3] === %d; })()`,
		x, y, want[0], want[1], want[2], want[3]), chromedp.WithPollingInterval(100*time.Millisecond))
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := poll(ctx, t)
		return err
	})
}
