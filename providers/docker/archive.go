package docker

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"time"

	"github.com/crabbox-dev/crabbox/providers/local"
)

// Paths inside a box.
const (
	// boxAgent is where the agent executable is bind-mounted.
	boxAgent = "/crabbox/bin/crabbox"
	// boxLeases holds the lease directory /crabbox/<leaseID>, which the
	// agent serves and removes when it stops.
	boxLeases = "/crabbox"
	// workRoot is the work root of every box.
	workRoot = "/work/crabbox"
	// sshPort is the port the agent serves SSH on inside the container.
	sshPort = 2222
	// boxUser is the SSH user; commands run as the container's root.
	boxUser = "root"
)

// maxRecordSize bounds a lease record read back from a container.
const maxRecordSize = 1 << 20

func boxLeaseDir(id string) string { return path.Join(boxLeases, id) }

func boxRecordPath(id string) string { return path.Join(boxLeaseDir(id), local.RecordFile) }

// boxFiles is the lease directory Acquire hands a box: on its agent's
// stdin, or, for an agent that cannot read it there, copied into the
// container before it starts (writeTar).
type boxFiles struct {
	leaseID string
	record  []byte // the lease record
	hostKey []byte // the box's private host key
	// fromCheckpoint: the container's image is a checkpoint, whose lease
	// directories the agent replaces (see boxlease.Payload).
	fromCheckpoint bool
}

// writeTar writes f as a tar stream rooted at "/".
func (f boxFiles) writeTar(w io.Writer) error {
	lease := "crabbox/" + f.leaseID
	// A nil content makes a directory.
	entries := []struct {
		name    string
		mode    int64
		content []byte
	}{
		{"crabbox", 0o755, nil},
		{lease, 0o700, nil},
		{lease + "/" + local.HostKeyFile, 0o600, f.hostKey},
		{lease + "/" + local.WorkDir, 0o700, nil},
		{lease + "/" + local.RecordFile, 0o600, f.record},
		{"work", 0o755, nil},
		{"work/crabbox", 0o755, nil},
	}
	tw := tar.NewWriter(w)
	now := time.Now()
	for _, e := range entries {
		h := &tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: e.mode, Size: int64(len(e.content)), ModTime: now}
		if e.content == nil {
			h.Typeflag, h.Name = tar.TypeDir, e.name+"/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.content); err != nil {
			return err
		}
	}
	return tw.Close()
}

// copyTo streams the tar stream write makes into the container's
// filesystem at "/".
func (b *Backend) copyTo(ctx context.Context, id string, write func(io.Writer) error) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err)
		done <- err
	}()
	err := b.cli.CopyToContainer(ctx, id, "/", pr)
	pr.CloseWithError(errors.New("copy to container ended")) // unblocks the writer if the engine stopped reading
	werr := <-done
	if err != nil {
		return err
	}
	return werr
}

// readFile reads one regular file out of a container.
func (b *Backend) readFile(ctx context.Context, id, name string, limit int64) ([]byte, error) {
	content, err := b.cli.CopyFromContainer(ctx, id, name)
	if err != nil {
		return nil, err
	}
	defer content.Close()
	tr := tar.NewReader(content)
	h, err := tr.Next()
	if err != nil {
		return nil, fmt.Errorf("read %s from container: %w", name, err)
	}
	if h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("%s in container is not a regular file", name)
	}
	if h.Size > limit {
		return nil, fmt.Errorf("%s in container is %d bytes, more than %d", name, h.Size, limit)
	}
	return io.ReadAll(io.LimitReader(tr, limit))
}

// writeFile replaces one regular file in a container (mode 0600, owned by
// root).
func (b *Backend) writeFile(ctx context.Context, id, name string, data []byte) error {
	return b.copyTo(ctx, id, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name[1:], Mode: 0o600, Size: int64(len(data)), ModTime: time.Now()})
		if err == nil {
			_, err = tw.Write(data)
		}
		if err == nil {
			err = tw.Close()
		}
		return err
	})
}
