package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/peterbourgon/ff/v3/ffcli"

	"github.com/crabbox-dev/crabbox"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/docker"
)

func (a *app) imageCmd() *ffcli.Command {
	build := a.imageBuildCmd()
	build.FlagSet.SetOutput(a.stderr)
	return &ffcli.Command{
		Name:       "image",
		ShortUsage: "crabbox image build --provider docker [--tag T]",
		ShortHelp:  "build box images locally (no registry needed)",
		LongHelp: `Build box images on this machine; only the docker provider has images to build.

  sudo crabbox image build --provider docker`,
		FlagSet:     flag.NewFlagSet("image", flag.ContinueOnError),
		Subcommands: []*ffcli.Command{build},
		Exec:        func(context.Context, []string) error { return flag.ErrHelp },
	}
}

func (a *app) imageBuildCmd() *ffcli.Command {
	fs, lf := a.newFlagSetFor("image build", func() []provider.Spec { return specsOf("docker") })
	// Only docker has images to build.
	lf.provider, fs.Lookup("provider").DefValue = "docker", "docker"
	tag := fs.String("tag", "", "image name (default: the configured --docker-image, "+docker.DefaultImage+")")
	suite := fs.String("suite", docker.DefaultSuite, "Debian release of the image")
	mirror := fs.String("mirror", "", "Debian archive to install from (default: the one this machine's apt configuration uses for the suite)")
	desktop := fs.Bool("desktop", false, "build the desktop image (Xvfb, x11vnc, xterm; default tag: the configured --docker-desktop-image, "+docker.DefaultDesktopImage+")")
	asJSON := fs.Bool("json", false, "print the image as JSON")
	return &ffcli.Command{
		Name:       "build",
		ShortUsage: "crabbox image build --provider docker [--desktop] [--tag T] [--suite S] [--mirror URL] [--json]",
		ShortHelp:  "build the default box image into the local Docker engine",
		LongHelp: `Build the docker provider's default box image without any registry: a
minimal Debian root filesystem (debootstrap --variant=minbase, plus git and
tar) made in a temporary directory and imported into the engine through its
API. Needs Linux, root and debootstrap; takes a few minutes.

With --desktop it builds the desktop image instead: the same plus Xvfb,
x11vnc, fonts, xterm and X utilities, for leases acquired with --desktop
(see crabbox vnc and crabbox screenshot).

  sudo crabbox image build --provider docker
  crabbox run --provider docker -- sh -c 'cat /etc/os-release; id'`,
		FlagSet: fs,
		Exec: a.layered(fs, lf, func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("image build takes no arguments, got %q", args)
			}
			return a.withClient(lf, false, func(c *crabbox.Client) error {
				b, err := c.Backend(lf.provider)
				if err != nil {
					return err
				}
				db, ok := b.(*docker.Backend)
				if !ok {
					return usagef("image build: provider %q has no images to build; use --provider docker", lf.provider)
				}
				image := *tag
				switch {
				case image != "":
				case *desktop:
					image = db.DesktopImage()
				default:
					image = db.Image()
				}
				id, err := db.BuildImage(ctx, docker.BuildOptions{Tag: image, Suite: *suite, Mirror: *mirror, Desktop: *desktop, Output: a.stderr})
				if err != nil {
					return err
				}
				if *asJSON {
					return writeJSON(a.stdout, struct {
						Image string `json:"image"`
						ID    string `json:"id"`
					}{image, id})
				}
				_, err = fmt.Fprintf(a.stdout, "built %s (%s)\n", image, id)
				return err
			})
		}),
	}
}
