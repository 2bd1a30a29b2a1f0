package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

// DefaultDesktopImage is the box image of desktop leases when none is
// configured: the image `crabbox image build --provider docker --desktop`
// makes.
const DefaultDesktopImage = "crabbox/box:bookworm-desktop"

// desktopPackages are what a desktop image adds to boxPackages: a
// virtual X server, a VNC server for it, fonts, and a few X clients that
// make a desktop useful to look at and to test with (xsetroot, xdpyinfo,
// xwininfo, xterm, xmessage).
var desktopPackages = []string{"xvfb", "x11vnc", "xfonts-base", "x11-utils", "x11-xserver-utils", "xterm"}

// labelDesktopImage marks an image made with a desktop: it has
// desktopScript.
const labelDesktopImage = "crabbox.desktop"

// desktopScript is the start script a desktop image carries. A desktop
// box's container runs it with the agent's command line: it starts Xvfb
// on the desktop display, waits until the display answers, starts x11vnc
// on the box's loopback (no password: only the lease's SSH connection
// reaches it) in the background once it is set up, and then becomes the
// agent, so that the box is ready only once its desktop is.
const desktopScript = "/usr/local/bin/crabbox-desktop"

// desktopScriptText is desktopScript's content. Nothing but the agent
// writes to stdout (the provider reads the agent's ready line there),
// and nothing but the agent reads stdin (the lease's payload).
const desktopScriptText = `#!/bin/sh
# crabbox desktop: an X display (Xvfb on :99) and a VNC server on the box's
# 127.0.0.1:5900, then the command given (the box's agent).
set -eu
export DISPLAY=:99
size=${CRABBOX_DESKTOP_SIZE:-1280x800}
# A box made from a checkpoint of a desktop box has the display's lock and
# socket of the box it was made of; no X server runs here yet.
rm -f /tmp/.X99-lock /tmp/.X11-unix/X99
Xvfb "$DISPLAY" -screen 0 "${size}x24" -nolisten tcp </dev/null >/tmp/crabbox-xvfb.log 2>&1 &
i=0
until xdpyinfo >/dev/null 2>&1; do
	i=$((i + 1))
	if [ "$i" -gt 200 ]; then
		echo "crabbox-desktop: the X display did not start:" >&2
		cat /tmp/crabbox-xvfb.log >&2
		exit 1
	fi
	sleep 0.1
done
x11vnc -display "$DISPLAY" -localhost -rfbport 5900 -forever -shared -nopw -quiet -bg \
	-o /tmp/crabbox-x11vnc.log </dev/null >/dev/null 2>&1 || {
	echo "crabbox-desktop: the VNC server did not start:" >&2
	cat /tmp/crabbox-x11vnc.log >&2
	exit 1
}
exec "$@"
`

// writeDesktopScript puts desktopScript into the root filesystem rootfs.
func writeDesktopScript(rootfs string) error {
	p := filepath.Join(rootfs, filepath.FromSlash(desktopScript))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(desktopScriptText), 0o755)
}

// desktopImage checks that image, a desktop lease's image, was made with
// a desktop, so that a box is never started without the display it was
// asked for.
func (b *Backend) desktopImage(ctx context.Context, image string) error {
	img, err := b.cli.ImageInspect(ctx, image)
	switch {
	case eng.IsNotFound(err):
		return fmt.Errorf("desktop image %q is not on the docker engine (nothing is pulled): make it with `crabbox image build --provider docker --desktop%s`: %w",
			image, desktopTagFlag(image), provider.ErrPrecondition)
	case err != nil:
		return engineErr(err)
	case img.Config.Labels[labelDesktopImage] != "true":
		return fmt.Errorf("image %q has no desktop (it was not built with `crabbox image build --provider docker --desktop`): %w", image, provider.ErrPrecondition)
	}
	return nil
}

// keepDesktop marks labels (a checkpoint image's, or a box's made from
// one) as those of a desktop image when from, the labels they are made
// from, are: the mark survives the masking of inherited labels, so a
// checkpoint of a desktop box forks into desktop boxes.
func keepDesktop(labels, from map[string]string) {
	if from[labelDesktopImage] == "true" {
		labels[labelDesktopImage] = "true"
	}
}

// desktopTagFlag is the --tag flag of `crabbox image build --desktop` for
// image, if it is not the default.
func desktopTagFlag(image string) string {
	if image == DefaultDesktopImage {
		return ""
	}
	return " --tag " + image
}
