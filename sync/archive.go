package sync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/internal/remote"
	"github.com/crabbox-dev/crabbox/provider"
)

// archiveFile is where a push to a delegated sandbox writes its archive,
// in the state directory; the unpack step removes it.
const archiveFile = "incoming.tar"

// PushArchive sends the prepared file set to the sandbox of delegated
// lease leaseID, through its provider's file API instead of an SSH
// session, with the same plan as Push: the sandbox keeps the manifest and
// fingerprint in StateDir(RemoteDir), only what differs from that manifest
// is sent, and only paths it lists are deleted. RemoteDir must be
// absolute.
//
// An unchanged file set whose fingerprint is known costs one ReadFile (the
// remote directory's Marker, which holds the fingerprint of the tree there
// as long as no push was cut short since). Otherwise the manifest (and the
// pending file of an interrupted push) are read; a remote directory whose
// marker does not match the manifest (deleted or replaced in the sandbox)
// is sent whole, as Push does, the changes are written as one tar archive
// with WriteFile, and one Run deletes the stale paths, extracts the archive
// with the sandbox's tar and installs the new manifest, exactly as the
// SSH push's transfer step does. With Checksum, one more Run hashes the
// sandbox's copies first. Unlike Push, it takes no lock in the sandbox:
// two pushes into one sandbox directory at once may leave it needing a
// FullResync.
func (p *Prepared) PushArchive(ctx context.Context, b provider.DelegatedFileBackend, leaseID string) (Stats, error) {
	start := time.Now()
	stats := Stats{Total: len(p.files)}
	fail := func(err error) (Stats, error) {
		stats.Hashed = p.hashed
		stats.Duration = p.took + time.Since(start)
		return stats, fmt.Errorf("sync %s to %s:%s: %w", p.opts.Root, leaseID, p.opts.RemoteDir, err)
	}
	if err := checkRemoteDir(p.opts.RemoteDir); err != nil {
		return fail(err)
	}
	if !path.IsAbs(p.opts.RemoteDir) {
		return fail(fmt.Errorf("remote directory %q is not absolute", p.opts.RemoteDir))
	}
	a := &archivePush{b: b, lease: leaseID, state: StateDir(p.opts.RemoteDir)}
	s := &session{prep: p, opts: p.opts, stats: &stats, planStart: start, prepared: p.took}
	if err := a.push(ctx, s); err != nil {
		return fail(err)
	}
	if stats.Skipped && p.local != nil {
		p.remember(p.fp, p.local)
	}
	stats.Hashed = p.hashed
	stats.Duration = p.took + time.Since(start)
	return stats, nil
}

// archivePush is one push to a delegated sandbox.
type archivePush struct {
	b     provider.DelegatedFileBackend
	lease string
	state string // StateDir of the remote directory
}

func (a *archivePush) push(ctx context.Context, s *session) error {
	quick := !s.opts.Checksum && !s.opts.FullResync
	markData, err := a.readPath(ctx, path.Join(s.opts.RemoteDir, Marker))
	if err != nil {
		return err
	}
	mark := markOf(markData)
	if quick && s.prep.fp != "" && mark == s.prep.fp {
		s.stats.Skipped = true
		s.stats.Plan = s.prepared + time.Since(s.planStart)
		return nil
	}
	manifestData, err := a.read(ctx, manifestFile)
	if err != nil {
		return err
	}
	pendingData, err := a.read(ctx, pendingFile)
	if err != nil {
		return err
	}
	prev, err := parseManifest(manifestData)
	if err != nil {
		return fmt.Errorf("%s/%s in the sandbox is malformed (%w); nothing was changed; remove it to start over", a.state, manifestFile, err)
	}
	var untrusted []string
	dirty := pendingData != nil
	if dirty {
		if untrusted, err = parseChanges(pendingData); err != nil {
			untrusted = untrustedByPlan(prev, pendingData)
		}
	}
	stray := (manifestData != nil || dirty) && strayed(mark, "", dirty, func() string { return fingerprint(prev) })
	if stray {
		s.warnStrayed()
		prev, untrusted = nil, nil
	}
	box := newBoxState(prev, untrusted)
	local, err := s.prep.manifest(ctx, box)
	if err != nil {
		return err
	}
	if quick && !dirty && !stray && isHash(mark) && mark == fingerprint(local) {
		// Files were touched, not changed.
		s.prep.fp = mark
		s.stats.Skipped = true
		s.stats.Plan = s.prepared + time.Since(s.planStart)
		return nil
	}
	send, del, err := s.plan(ctx, local, box, func(ctx context.Context, local []Entry, box *boxState) ([]Entry, error) {
		return a.verify(ctx, s.opts.RemoteDir, local, box)
	})
	if err != nil {
		return err
	}

	transferStart := time.Now()
	if err := a.upload(ctx, s, local, send, del, box); err != nil {
		return err
	}
	s.stats.Transfer = time.Since(transferStart)
	applyStart := time.Now()
	defer func() { s.stats.Apply = time.Since(applyStart) }()
	return a.unpack(ctx, s.opts.RemoteDir, del, cmdTar(s.opts))
}

func cmdTar(o Options) string {
	if o.tar != "" {
		return o.tar
	}
	return "tar"
}

// markOf is what the remote directory's Marker, data (nil for none), says,
// as sessionScript reports it.
func markOf(data []byte) string {
	switch m := strings.TrimSpace(string(data)); {
	case data == nil:
		return markNone
	case m == "":
		return markEmpty
	case isHash(m):
		return m
	}
	return markOther
}

// read returns the state file name, nil when the sandbox has none.
func (a *archivePush) read(ctx context.Context, name string) ([]byte, error) {
	return a.readPath(ctx, path.Join(a.state, name))
}

// readPath returns the file p, nil when the sandbox has none.
func (a *archivePush) readPath(ctx context.Context, p string) ([]byte, error) {
	rc, err := a.b.ReadFile(ctx, provider.ReadFileRequest{LeaseID: a.lease, Path: p})
	if errors.Is(err, provider.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(data) > maxManifestSize {
		return nil, fmt.Errorf("%s in the sandbox is larger than %d bytes; remove it to start over", p, maxManifestSize)
	}
	return data, nil
}

// upload streams the push's archive (writeArchive's, as an SSH push sends
// it) into the sandbox's state directory, and waits for the local caches
// it saves on the way.
func (a *archivePush) upload(ctx context.Context, s *session, local []Entry, send []int, del []string, box *boxState) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.writeArchive(ctx, pw, local, send, del, box)
		pw.CloseWithError(err)
		done <- err
	}()
	werr := a.b.WriteFile(ctx, provider.WriteFileRequest{
		LeaseID: a.lease, Path: path.Join(a.state, archiveFile), Mode: 0o600, Body: pr, Size: -1,
	})
	pr.CloseWithError(errors.New("the sandbox stopped reading the archive"))
	aerr := <-done
	if s.saved != nil {
		<-s.saved
	}
	if aerr != nil {
		return aerr
	}
	if werr != nil {
		return fmt.Errorf("write the archive into the sandbox: %w", werr)
	}
	return nil
}

// unpack runs the SSH push's transfer step in the sandbox, with the
// uploaded archive as its input, and removes the archive. It runs in
// the state directory, which the upload made.
func (a *archivePush) unpack(ctx context.Context, dir string, del []string, tar string) error {
	parent, _ := splitRemoteDir(dir)
	archive := path.Join(a.state, archiveFile)
	script := "crabbox_parent=" + remote.Quote(parent) + " s=" + remote.Quote(a.state) + "\n" +
		"trap 'rm -f -- " + remote.Quote(archive) + "' EXIT\n" +
		"mkdir -p -- " + remote.Quote(dir) + " && cd -- " + remote.Quote(dir) + " && exec <" + remote.Quote(archive) + " || exit 1\n" +
		transferStep(del, tar, false, false, nil)
	var stderr tail
	res, err := a.b.Run(ctx, provider.DelegatedRunRequest{
		LeaseID: a.lease, Command: []string{"sh", "-c", script, scriptName}, Dir: a.state, Stdout: io.Discard, Stderr: &stderr,
	})
	if err != nil {
		return fmt.Errorf("unpack the archive in the sandbox: %w", err)
	}
	if res.ExitCode != 0 {
		if at, free, known, full := diskFull(string(stderr.b)); full {
			return diskFullError("sandbox", dir, at, free, known)
		}
		return fmt.Errorf("unpack the archive in the sandbox: exit %d%s", res.ExitCode, stderr.suffix())
	}
	return nil
}

// verify hashes in the sandbox the files the trusted manifest would leave
// alone (the SSH push's hash step) and returns the entries whose content
// it confirms.
func (a *archivePush) verify(ctx context.Context, dir string, local []Entry, box *boxState) ([]Entry, error) {
	var check []string
	for _, e := range local {
		if t, ok := box.lookup(e.Path); ok && t.same(e) && e.Link == "" {
			check = append(check, e.Path)
		}
	}
	if len(check) == 0 {
		return nil, nil
	}
	var out bytes.Buffer
	var stderr tail
	res, err := a.b.Run(ctx, provider.DelegatedRunRequest{
		LeaseID: a.lease, Command: []string{"sh", "-c", "cd -- " + remote.Quote(dir) + " 2>/dev/null || { echo '" + hashedMarker + "'; exit 0; }\n" + hashStep(check)},
		Dir: a.state, Stdout: &out, Stderr: &stderr,
	})
	if err != nil {
		return nil, fmt.Errorf("hash files in the sandbox: %w", err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("hash files in the sandbox: exit %d%s", res.ExitCode, stderr.suffix())
	}
	var lines []string
	for line := range strings.Lines(out.String()) {
		line = strings.TrimSuffix(line, "\n")
		if line == hashedMarker {
			break
		}
		lines = append(lines, line)
	}
	sums := parseHashes(lines)
	var verified []Entry
	for _, p := range check {
		if t, _ := box.lookup(p); sums[p] == t.SHA256 {
			verified = append(verified, t)
		}
	}
	return verified, nil
}
