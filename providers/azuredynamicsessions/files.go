package azuredynamicsessions

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/provider"
)

// stageDir is where files pass through the file API, relative to the
// file area: the API reaches only the file area, a file goes anywhere.
const stageDir = crabboxDir + "/stage"

func newStageName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "f_" + hex.EncodeToString(b[:])
}

// WriteFile uploads req.Body into the session's file area, then moves it
// to req.Path (making its parent directories) with req.Mode's permission
// bits. The body is read whole first, so a request answered 429 or 5xx
// can be sent again.
func (b *Backend) WriteFile(ctx context.Context, req provider.WriteFileRequest) error {
	err := checkPath(req.Path)
	if err == nil && req.Path == "/" {
		err = errors.New(`path "/" is not a file`)
	}
	if err != nil {
		return fmt.Errorf("%s: write file on %s: %w", Name, req.LeaseID, err)
	}
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, req.Body); err != nil {
		return fmt.Errorf("%s: write %s on %s: read the body: %w", Name, req.Path, req.LeaseID, err)
	}
	if req.Size >= 0 && int64(buf.Len()) != req.Size {
		return fmt.Errorf("%s: write %s on %s: the body has %d bytes, not the %d announced", Name, req.Path, req.LeaseID, buf.Len(), req.Size)
	}
	if _, _, err := b.live(ctx, req.LeaseID); err != nil {
		return err
	}
	sid, name := b.Identifier(req.LeaseID), newStageName()
	if err := b.api.upload(ctx, sid, stageDir, name, buf.Bytes()); err != nil {
		return fmt.Errorf("%s: write %s on %s: %w", Name, req.Path, req.LeaseID, err)
	}
	script := fmt.Sprintf("s=%s; t=%s\nmkdir -p -- %s && chmod %o \"$s\" && mv -f -- \"$s\" \"$t\" && echo crabbox-written\n",
		remote.Quote(FilesDir+"/"+stageDir+"/"+name), remote.Quote(req.Path), remote.Quote(path.Dir(req.Path)), req.Mode.Perm())
	out, err := b.api.execute(ctx, "move "+name+" to "+req.Path, sid, script, execTimeout)
	if err == nil && !strings.Contains(out, "crabbox-written") {
		err = fmt.Errorf("move %s to %s: it failed (output %q)", name, req.Path, truncate(out, 200))
	}
	if err != nil {
		return fmt.Errorf("%s: write %s on %s: %w", Name, req.Path, req.LeaseID, err)
	}
	return nil
}

// ReadFile copies req.Path into the session's file area and opens it
// there; closing the reader deletes the copy. A path that is not a
// regular file is ErrNotFound.
func (b *Backend) ReadFile(ctx context.Context, req provider.ReadFileRequest) (io.ReadCloser, error) {
	if err := checkPath(req.Path); err != nil {
		return nil, fmt.Errorf("%s: read file on %s: %w", Name, req.LeaseID, err)
	}
	if _, _, err := b.live(ctx, req.LeaseID); err != nil {
		return nil, err
	}
	sid, name := b.Identifier(req.LeaseID), newStageName()
	stage := FilesDir + "/" + stageDir
	script := fmt.Sprintf("t=%s; s=%s\nif [ ! -f \"$t\" ]; then echo crabbox-missing; exit 0; fi\nmkdir -p -- %s && cp -- \"$t\" \"$s\" && echo crabbox-staged\n",
		remote.Quote(req.Path), remote.Quote(stage+"/"+name), remote.Quote(stage))
	out, err := b.api.execute(ctx, "stage "+req.Path, sid, script, execTimeout)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: read %s on %s: %w", Name, req.Path, req.LeaseID, err)
	case strings.Contains(out, "crabbox-missing"):
		return nil, fmt.Errorf("%s: read %s on %s: no such file: %w", Name, req.Path, req.LeaseID, provider.ErrNotFound)
	case !strings.Contains(out, "crabbox-staged"):
		return nil, fmt.Errorf("%s: read %s on %s: copying it failed (output %q)", Name, req.Path, req.LeaseID, truncate(out, 200))
	}
	rc, err := b.api.content(ctx, sid, stageDir, name)
	if err != nil {
		return nil, fmt.Errorf("%s: read %s on %s: %w", Name, req.Path, req.LeaseID, err)
	}
	return &stagedFile{ReadCloser: rc, remove: func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := b.api.deleteFile(rctx, sid, stageDir, name); err != nil {
			b.rt.Logger.Debug("azure dynamic sessions: delete a staged file", "session", sid, "file", name, "err", err)
		}
	}}, nil
}

// stagedFile is a download whose Close also deletes the staged copy.
type stagedFile struct {
	io.ReadCloser
	remove func()
	closed bool
}

func (f *stagedFile) Close() error {
	err := f.ReadCloser.Close()
	if !f.closed {
		f.closed = true
		f.remove()
	}
	return err
}
