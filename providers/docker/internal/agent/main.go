// Command agent is `crabbox agent` without the rest of the CLI: the small
// static executable the docker provider runs in boxes (built once and kept
// in the user's cache, see the provider's docs), and the provider's tests
// use it so that they need not build the whole CLI (with every provider)
// first. It takes the same flags and serves with the same code as
// `crabbox agent`, and one more: with --lease-stdin it first makes the
// lease directory from the payload the provider writes to its standard
// input (package boxlease), so that nothing need be copied into the
// container before it starts. Once it serves, it removes the private host
// key file from the lease directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/crabbox-dev/crabbox/providers/docker/internal/boxlease"
	"github.com/crabbox-dev/crabbox/providers/local"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "agent" {
		fmt.Fprintln(os.Stderr, "usage: agent agent --lease-dir DIR [--listen ADDR] [--lease-stdin]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	dir := fs.String("lease-dir", "", "the lease directory to serve")
	listen := fs.String("listen", "", "TCP address to serve on")
	fromStdin := fs.Bool("lease-stdin", false, "make the lease directory from the payload on standard input first")
	_ = fs.Parse(os.Args[2:])
	if *dir == "" || fs.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "agent: want --lease-dir DIR and no arguments")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *fromStdin {
		p, err := boxlease.Read(os.Stdin)
		if err == nil {
			err = p.Install(*dir)
		}
		if err != nil {
			log.Error("agent: no lease directory", "dir", *dir, "err", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ready := &forgetHostKey{w: os.Stdout, file: filepath.Join(*dir, local.HostKeyFile), log: log}
	if err := local.ServeAgentOn(ctx, *dir, *listen, ready, log); err != nil {
		log.Error("agent failed", "err", err)
		os.Exit(1)
	}
}

// forgetHostKey passes the agent's ready line on to w after removing the
// lease directory's private host key file: the server has loaded the key
// by then and nothing reads the file again, so the key does not stay on
// the box's filesystem, nor get into the checkpoint images made of it.
type forgetHostKey struct {
	w    io.Writer
	file string
	log  *slog.Logger
	done bool
}

func (f *forgetHostKey) Write(p []byte) (int, error) {
	if !f.done {
		f.done = true
		if err := os.Remove(f.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.log.Warn("agent: the loaded host key file stays", "err", err)
		}
	}
	return f.w.Write(p)
}
