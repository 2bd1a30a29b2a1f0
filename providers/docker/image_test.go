package docker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

// fakeBuild stands in for debootstrap and tar: debootstrap makes the root
// filesystem directory (with a downloaded package that must not end up in
// the image), tar writes the busybox root filesystem.
type fakeBuild struct {
	rootfs          []byte
	failDebootstrap bool
	calls           [][]string
	madeDir         string
	// script is the desktop start script in the root filesystem at tar
	// time, if any.
	script []byte
}

func (f *fakeBuild) Run(_ context.Context, cmd provider.Command) error {
	f.calls = append(f.calls, append([]string{filepath.Base(cmd.Path)}, cmd.Args...))
	switch filepath.Base(cmd.Path) {
	case "debootstrap":
		if f.failDebootstrap {
			return errors.New("exit status 1")
		}
		f.madeDir = cmd.Args[len(cmd.Args)-2]
		archives := filepath.Join(f.madeDir, "var", "cache", "apt", "archives")
		if err := os.MkdirAll(archives, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(archives, "git.deb"), []byte("deb"), 0o644)
	case "tar":
		if _, err := os.Stat(filepath.Join(f.madeDir, "var", "cache", "apt", "archives", "git.deb")); !os.IsNotExist(err) {
			return errors.New("downloaded packages were not removed before tar")
		}
		f.script, _ = os.ReadFile(filepath.Join(f.madeDir, filepath.FromSlash(desktopScript)))
		_, err := cmd.Stdout.Write(f.rootfs)
		return err
	}
	return errors.New("unexpected command " + cmd.Path)
}

func TestBuildImage(t *testing.T) {
	f := engine(t)
	if _, err := exec.LookPath("debootstrap"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: BuildImage needs root and debootstrap (see .ci/setup.d/10-docker.sh)")
		}
		t.Skip("BuildImage needs root and debootstrap")
	}
	busybox, _ := exec.LookPath("busybox")
	rootfs, err := busyboxRootFS(busybox)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeBuild{rootfs: rootfs}
	b, err := New(Config{Image: f.image}, provider.Runtime{Commands: fake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	tag := f.image + "-built"
	ctx := context.Background()
	id, err := b.BuildImage(ctx, BuildOptions{Tag: tag, Suite: "trixie", Mirror: "http://127.0.0.1:1/debian"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.cli.ImageRemove(context.Background(), tag, eng.ImageRemoveOptions{Force: true}); err != nil {
			t.Errorf("remove image %s: %v", tag, err)
		}
	})
	debootstrap := fake.calls[0]
	want := []string{"debootstrap", "--variant=minbase", "--include=git,tar,ca-certificates", "trixie", fake.madeDir, "http://127.0.0.1:1/debian"}
	if diff := cmp.Diff(want, debootstrap); diff != "" {
		t.Errorf("debootstrap call (-want +got):\n%s", diff)
	}
	if len(fake.calls) != 2 || fake.calls[1][0] != "tar" || !slices.Contains(fake.calls[1], fake.madeDir) {
		t.Errorf("calls = %q, want debootstrap, then tar of %s", fake.calls, fake.madeDir)
	}
	if _, err := os.Stat(filepath.Dir(fake.madeDir)); !os.IsNotExist(err) {
		t.Errorf("temporary root filesystem %s left behind: %v", fake.madeDir, err)
	}
	img, err := b.cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.ID != id || !slices.Equal(img.Config.Cmd, []string{"/bin/sh"}) || !slices.ContainsFunc(img.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		t.Errorf("built image %s: ID %s (BuildImage said %s), Cmd %q, Env %q", tag, img.ID, id, img.Config.Cmd, img.Config.Env)
	}

	failing := &fakeBuild{failDebootstrap: true}
	b2, err := New(Config{}, provider.Runtime{Commands: failing})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b2.Close() })
	const mirror = "http://127.0.0.1:1/debian"
	_, err = b2.BuildImage(ctx, BuildOptions{Tag: tag + "-never", Mirror: mirror})
	if err == nil || !strings.Contains(err.Error(), "debootstrap "+DefaultSuite+" from "+mirror) {
		t.Errorf("BuildImage with a failing debootstrap: err = %v, want it to name the suite and mirror", err)
	}
	if _, err := b2.BuildImage(ctx, BuildOptions{Suite: "--help"}); err == nil || !strings.Contains(err.Error(), `suite "--help"`) {
		t.Errorf("BuildImage with suite --help: err = %v", err)
	}
}

// The desktop image adds the desktop packages and the start script, and
// carries the label desktop leases check for.
func TestBuildDesktopImage(t *testing.T) {
	f := engine(t)
	if _, err := exec.LookPath("debootstrap"); err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true: BuildImage needs root and debootstrap (see .ci/setup.d/10-docker.sh)")
		}
		t.Skip("BuildImage needs root and debootstrap")
	}
	busybox, _ := exec.LookPath("busybox")
	rootfs, err := busyboxRootFS(busybox)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeBuild{rootfs: rootfs}
	tag := f.image + "-desktop"
	b, err := New(Config{Image: f.image, DesktopImage: tag}, provider.Runtime{Commands: fake, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	// No tag: the configured desktop image.
	if _, err := b.BuildImage(ctx, BuildOptions{Desktop: true, Suite: "bookworm", Mirror: "http://127.0.0.1:1/debian"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.cli.ImageRemove(context.Background(), tag, eng.ImageRemoveOptions{Force: true}); err != nil {
			t.Errorf("remove image %s: %v", tag, err)
		}
	})
	want := "--include=" + strings.Join(append(slices.Clone(boxPackages), desktopPackages...), ",")
	if got := fake.calls[0][2]; got != want || !strings.Contains(got, "xvfb") || !strings.Contains(got, "x11vnc") {
		t.Errorf("debootstrap %s, want %s", got, want)
	}
	if string(fake.script) != desktopScriptText {
		t.Errorf("the root filesystem's %s at tar time = %q, want the desktop start script", desktopScript, fake.script)
	}
	img, err := b.cli.ImageInspect(ctx, tag)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.Labels[labelDesktopImage] != "true" {
		t.Errorf("desktop image labels %v, want %s=true", img.Config.Labels, labelDesktopImage)
	}
	if err := b.desktopImage(ctx, tag); err != nil {
		t.Errorf("the built image is not taken as a desktop image: %v", err)
	}
	if err := b.desktopImage(ctx, f.image); err == nil || !errors.Is(err, provider.ErrPrecondition) {
		t.Errorf("the plain image taken as a desktop image: %v", err)
	}
	if err := b.desktopImage(ctx, f.image+"-nowhere"); err == nil || !strings.Contains(err.Error(), "--desktop --tag "+f.image+"-nowhere") {
		t.Errorf("a missing desktop image: %v, want how to build it", err)
	}
}
