package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

// DefaultSuite is the Debian release BuildImage installs by default.
const DefaultSuite = "bookworm"

// boxPackages are installed on top of Debian's minbase: what sync and run
// need on a box (tar, and git for repositories that want it).
var boxPackages = []string{"git", "tar", "ca-certificates"}

// imageChanges are Dockerfile instructions applied to imported images.
var imageChanges = []string{
	"ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	`CMD ["/bin/sh"]`,
}

// BuildOptions shape BuildImage.
type BuildOptions struct {
	// Tag names the image; empty means the backend's configured image
	// (Config.Image, by default DefaultImage).
	Tag string
	// Suite is the Debian release; empty means DefaultSuite.
	Suite string
	// Mirror is the Debian archive to install from; empty means the one
	// this machine's apt configuration installs from (see AptMirror).
	Mirror string
	// Output receives debootstrap's progress; nil discards it.
	Output io.Writer
	// Desktop makes a desktop image (see provider.FeatureDesktop): Xvfb,
	// x11vnc, fonts and a few X clients on top, and the start script that
	// desktop leases run; its default tag is the backend's desktop image
	// (Config.DesktopImage, by default DefaultDesktopImage).
	Desktop bool
}

// BuildImage makes the default box image without any registry: a minimal
// Debian root filesystem (debootstrap --variant=minbase, plus git and tar)
// in a temporary directory, imported into the engine as opts.Tag. It needs
// Linux, root and debootstrap, run through the runtime's command runner,
// and returns the image ID.
func (b *Backend) BuildImage(ctx context.Context, opts BuildOptions) (string, error) {
	if opts.Tag == "" {
		opts.Tag = b.cfg.Image
		if opts.Desktop {
			opts.Tag = b.cfg.DesktopImage
		}
	}
	tag, err := imageRef(opts.Tag)
	if err != nil {
		return "", err
	}
	if opts.Suite == "" {
		opts.Suite = DefaultSuite
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if strings.ContainsAny(opts.Suite, "/ \t") || strings.HasPrefix(opts.Suite, "-") {
		return "", fmt.Errorf("build image: suite %q is not a Debian release name", opts.Suite)
	}
	if opts.Mirror == "" {
		if opts.Mirror, err = AptMirror(opts.Suite); err != nil {
			return "", fmt.Errorf("build image: %w", err)
		}
	}
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		return "", fmt.Errorf("build image: debootstrap needs Linux and root (run it as root, e.g. with sudo): %w", provider.ErrPrecondition)
	}
	debootstrap, err := exec.LookPath("debootstrap")
	if err != nil {
		return "", fmt.Errorf("build image: debootstrap is not installed (apt-get install debootstrap): %w", provider.ErrPrecondition)
	}
	tarPath, err := exec.LookPath("tar")
	if err != nil {
		return "", fmt.Errorf("build image: tar is not installed: %w", provider.ErrPrecondition)
	}
	if _, err := b.cli.Ping(ctx); err != nil {
		return "", engineErr(fmt.Errorf("build image: %w", err))
	}
	dir, err := os.MkdirTemp("", "crabbox-rootfs-")
	if err != nil {
		return "", fmt.Errorf("build image: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			b.rt.Logger.Warn("build image: temporary root filesystem not removed", "dir", dir, "err", err)
		}
	}()
	rootfs := filepath.Join(dir, "rootfs")
	packages, changes := boxPackages, imageChanges
	if opts.Desktop {
		packages = append(slices.Clone(boxPackages), desktopPackages...)
		changes = append(slices.Clone(imageChanges), "LABEL "+labelDesktopImage+"=true")
	}
	err = b.rt.Commands.Run(ctx, provider.Command{
		Path:   debootstrap,
		Args:   []string{"--variant=minbase", "--include=" + strings.Join(packages, ","), opts.Suite, rootfs, opts.Mirror},
		Stdout: opts.Output, Stderr: opts.Output,
	})
	if err != nil {
		return "", fmt.Errorf("build image: debootstrap %s from %s: %w", opts.Suite, opts.Mirror, err)
	}
	// Downloaded packages are of no use in the image.
	debs, _ := filepath.Glob(filepath.Join(rootfs, "var", "cache", "apt", "archives", "*.deb"))
	for _, deb := range debs {
		_ = os.Remove(deb)
	}
	if opts.Desktop {
		if err := writeDesktopScript(rootfs); err != nil {
			return "", fmt.Errorf("build image: desktop start script: %w", err)
		}
	}

	pr, pw := io.Pipe()
	tarred := make(chan error, 1)
	go func() {
		err := b.rt.Commands.Run(ctx, provider.Command{
			Path: tarPath, Args: []string{"--numeric-owner", "-C", rootfs, "-c", "."},
			Stdout: pw, Stderr: opts.Output,
		})
		pw.CloseWithError(err)
		tarred <- err
	}()
	id, err := b.importImage(ctx, pr, tag, changes)
	pr.CloseWithError(errors.New("import ended")) // stops tar if the import failed early
	if terr := <-tarred; terr != nil && err == nil {
		err = fmt.Errorf("build image: tar the root filesystem: %w", terr)
	}
	if err != nil {
		return "", err
	}
	b.rt.Logger.Info("docker box image built", "image", tag, "id", id)
	return id, nil
}

// imageRef checks an image reference; empty means DefaultImage.
func imageRef(tag string) (string, error) {
	if tag == "" {
		return DefaultImage, nil
	}
	if err := checkImageRef(tag); err != nil {
		return "", fmt.Errorf("image tag %q: %w", tag, err)
	}
	return tag, nil
}

// ImportImage imports rootfs, a tar stream of a root filesystem, into the
// engine as the image tag (empty means DefaultImage), with PATH set and
// /bin/sh as its command, and returns the image ID. Any root filesystem
// with /bin/sh makes a box image.
func (b *Backend) ImportImage(ctx context.Context, rootfs io.Reader, tag string) (string, error) {
	tag, err := imageRef(tag)
	if err != nil {
		return "", err
	}
	return b.importImage(ctx, rootfs, tag, imageChanges)
}

// importImage imports rootfs as tag (checked) with changes.
func (b *Backend) importImage(ctx context.Context, rootfs io.Reader, tag string, changes []string) (string, error) {
	id, err := b.cli.ImageImport(ctx, rootfs, tag, eng.ImportOptions{Message: "crabbox box image", Changes: changes})
	if err != nil {
		return "", engineErr(err)
	}
	return id, nil
}
