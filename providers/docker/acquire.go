package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/docker/internal/boxlease"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
	"github.com/crabbox-dev/crabbox/providers/local"
)

const (
	// readyTimeout bounds how long a started box may take to announce that
	// it serves, when the caller's context has no earlier deadline.
	readyTimeout = 30 * time.Second
	// rollbackTimeout bounds removing a half-made container after a failed
	// acquire, which runs even when the caller's context is cancelled.
	rollbackTimeout = time.Minute
	// logTailBytes is how much of a failed box's output an error quotes.
	logTailBytes = 2048
)

// Acquire creates, fills and starts the lease's container and waits until
// its agent serves. If any step after the container's creation fails, it
// removes the container. Its errors do not repeat the lease ID, which the
// caller's own error names.
func (b *Backend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	if err := b.checkRequest(req); err != nil {
		return provider.LeaseTarget{}, err
	}
	unlock, err := b.lockAcquire(req.LeaseID)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	defer func() {
		if err := unlock(); err != nil {
			b.rt.Logger.Warn("docker acquire lock not removed", "lease", req.LeaseID, "err", err)
		}
	}()
	target, err := b.acquire(ctx, req)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Info("docker lease acquired", "lease", req.LeaseID, "container", target.CloudID, "port", target.Port, "expires", target.ExpiresAt)
	return target, nil
}

func (b *Backend) checkRequest(req provider.AcquireRequest) error {
	if !lease.IsID(req.LeaseID) {
		return fmt.Errorf("lease ID %q is malformed: want cbx_ and 12 lowercase hex digits", req.LeaseID)
	}
	if req.Slug != "" && !lease.ValidSlug(req.Slug) {
		return fmt.Errorf("slug %q is malformed: want lowercase letters, digits and dashes, at most 41", req.Slug)
	}
	if now := b.rt.Clock.Now(); !req.ExpiresAt.After(now) {
		return fmt.Errorf("expiry %s is not after now (%s)", req.ExpiresAt.Format(time.RFC3339), now.Format(time.RFC3339))
	}
	for k := range req.Labels {
		if err := checkExtraLabel(k); err != nil {
			return err
		}
	}
	return nil
}

// CheckConfig asks whether the engine is there before the library records
// a new lease (provider.ConfigChecker): an engine that is down or
// unreachable fails the acquire with nothing left behind, where a claim
// recorded first would stay, failed, for cleanup. It settles the API
// version too, which the acquire's first request would otherwise do.
func (b *Backend) CheckConfig(ctx context.Context) error {
	if _, err := b.cli.Ping(ctx); err != nil {
		return engineErr(err)
	}
	return nil
}

func (b *Backend) acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	labels := boxLabels(b.cfg.Labels, req.Labels, req.LeaseID, req.Slug,
		req.CreatedAt, req.ExpiresAt, req.TTL, req.IdleTimeout, req.Keep)
	image := b.cfg.Image
	if provider.WantsDesktop(req.Labels) {
		image = b.cfg.DesktopImage
		if err := b.desktopImage(ctx, image); err != nil {
			return provider.LeaseTarget{}, err
		}
	}
	return b.makeBox(ctx, boxSpec{
		name: containerName(req.Slug, req.LeaseID), image: image, labels: labels,
		record: local.AgentLease{
			ID: req.LeaseID, Slug: req.Slug, CreatedAt: req.CreatedAt.UTC(), ExpiresAt: req.ExpiresAt.UTC(),
			Labels: req.Labels, AuthorizedKey: req.PublicKey,
		},
	})
}

// boxSpec is what makeBox makes a box of.
type boxSpec struct {
	name   string // the container's name
	image  string
	labels map[string]string // all but the host key's
	// record is the lease record, but for the user and host key, which
	// makeBox fills in.
	record local.AgentLease
	// checkpoint, when set, is the checkpoint whose image is the box's:
	// a missing image is ErrNotFound, and the image's lease directories
	// are replaced.
	checkpoint string
}

// makeBox creates the container s describes, with a host key made here,
// starts it and waits until its agent serves. If any step after the
// container's creation fails, it removes the container.
func (b *Backend) makeBox(ctx context.Context, s boxSpec) (provider.LeaseTarget, error) {
	began := b.rt.Clock.Now()
	version, err := b.cli.ServerVersion(ctx)
	if err != nil {
		return provider.LeaseTarget{}, engineErr(err)
	}
	if version.Os != "" && version.Os != "linux" {
		return provider.LeaseTarget{}, fmt.Errorf("the docker engine runs %s containers; boxes need linux: %w", version.Os, provider.ErrPrecondition)
	}
	agent, err := b.resolveAgent(ctx, version.Arch)
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("%w: %w", err, provider.ErrPrecondition)
	}
	agent.stdin = agent.stdin && !b.copyLease
	hostKey, hostPub, err := local.NewHostKey()
	if err != nil {
		return provider.LeaseTarget{}, fmt.Errorf("host key: %w", err)
	}
	rec := s.record
	rec.User, rec.HostKey = boxUser, hostPub
	record, err := local.EncodeRecord(rec)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	prepared := b.rt.Clock.Now()

	labels := maps.Clone(s.labels)
	labels[labelHostKey] = hostPub
	containerID, err := b.create(ctx, s, labels, agent)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	created := b.rt.Clock.Now()
	x, err := b.start(ctx, containerID, agent, boxFiles{leaseID: rec.ID, record: record, hostKey: hostKey, fromCheckpoint: s.checkpoint != ""})
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rerr := b.remove(rctx, containerID); rerr != nil {
			return provider.LeaseTarget{}, errors.Join(err, fmt.Errorf("roll back: %w", rerr))
		}
		return provider.LeaseTarget{}, err
	}
	b.rt.Logger.Debug("docker acquire steps", "lease", rec.ID, "prepare", prepared.Sub(began),
		"create", created.Sub(prepared), "start", b.rt.Clock.Since(created))
	b.cacheRecord(x, rec.ExpiresAt, nil)
	// The box is described by the record put into it: reading it back
	// would cost a copy out of the container. Its host key is the one
	// made here.
	return describe(x, &local.AgentLease{ExpiresAt: rec.ExpiresAt, HostKey: hostPub}), nil
}

// create creates the container of s with labels, not started. The agent
// is bind-mounted read-only (nothing is copied); a small agent reads its
// lease directory from the container's stdin, which the container keeps
// open until start attaches to it.
func (b *Backend) create(ctx context.Context, s boxSpec, labels map[string]string, agent agentBin) (string, error) {
	id := s.record.ID
	exposed, bindings := portBindings()
	args := []string{"agent", "--lease-dir", boxLeaseDir(id), "--listen", ":" + strconv.Itoa(sshPort)}
	if agent.stdin {
		args = append(args, "--lease-stdin")
	}
	entry := []string{boxAgent}
	if provider.WantsDesktop(s.record.Labels) {
		// The desktop starts first, then becomes the agent.
		entry = []string{"/bin/sh", desktopScript, boxAgent}
	}
	cfg := eng.ContainerConfig{
		Image:        s.image,
		Entrypoint:   entry,
		Cmd:          args,
		User:         "0:0",
		WorkingDir:   "/",
		ExposedPorts: exposed,
		Labels:       labels,
		// With StdinOnce the engine closes the agent's stdin when the
		// attach that wrote the payload ends: an agent whose starter
		// died before writing it reads an end and exits.
		OpenStdin: agent.stdin, StdinOnce: agent.stdin, AttachStdin: agent.stdin,
		AttachStdout: true, AttachStderr: true,
	}
	cfg.HostConfig = &eng.HostConfig{
		PortBindings: bindings,
		// The box goes away by itself when its agent stops at the expiry.
		AutoRemove: true,
		// An init process reaps what commands leave behind and passes
		// signals on to the agent.
		Init:        new(true),
		NanoCPUs:    b.cfg.NanoCPUs,
		Memory:      b.cfg.Memory,
		Mounts:      []eng.Mount{{Type: "bind", Source: agent.path, Target: boxAgent, ReadOnly: true}},
		NetworkMode: b.cfg.Network,
	}
	res, err := b.cli.ContainerCreate(ctx, s.name, cfg)
	switch {
	case err == nil:
	case eng.IsNotFound(err) && strings.Contains(strings.ToLower(err.Error()), "image") && s.checkpoint != "":
		return "", fmt.Errorf("the image of checkpoint %s is not on the docker engine: %w", s.checkpoint, provider.ErrNotFound)
	case eng.IsNotFound(err) && strings.Contains(strings.ToLower(err.Error()), "image"):
		return "", fmt.Errorf("image %q is not on the docker engine (nothing is pulled): make it with `crabbox image build --provider docker%s` or choose another with --docker-image: %w",
			s.image, tagFlag(s.image), provider.ErrPrecondition)
	case eng.IsConflict(err):
		return "", engineErr(fmt.Errorf("a container of this lease exists: %w", err))
	default:
		return "", engineErr(err)
	}
	for _, w := range res.Warnings {
		b.rt.Logger.Warn("docker engine warning", "lease", id, "warning", w)
	}
	b.rt.Logger.Debug("docker container created", "lease", id, "container", res.ID)
	if b.afterCreate != nil {
		if err := b.afterCreate(ctx, res.ID); err != nil {
			return "", errors.Join(err, b.remove(context.WithoutCancel(ctx), res.ID))
		}
	}
	return res.ID, nil
}

// tagFlag is the --tag flag of `crabbox image build` for image, if it is
// not the default.
func tagFlag(image string) string {
	if image == DefaultImage {
		return ""
	}
	return " --tag " + image
}

// start starts the created container with the lease's files (on the
// agent's stdin, or copied in before the start for an agent that cannot
// read them there), waits until its agent serves, and returns the running
// box.
func (b *Backend) start(ctx context.Context, containerID string, agent agentBin, files boxFiles) (box, error) {
	began := b.rt.Clock.Now()
	if !agent.stdin {
		if err := b.copyTo(ctx, containerID, files.writeTar); err != nil {
			return box{}, engineErr(fmt.Errorf("put the lease into the container: %w", err))
		}
	}
	copied := b.rt.Clock.Now()
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	// Attached before the start, as `docker run` does, so that no output
	// is missed and no second request follows the output.
	att, err := b.cli.ContainerAttach(ctx, containerID, eng.AttachOptions{Stdin: agent.stdin, Stdout: true, Stderr: true})
	if err != nil {
		return box{}, engineErr(err)
	}
	defer att.Close()
	if err := b.cli.ContainerStart(ctx, containerID); err != nil {
		return box{}, engineErr(err)
	}
	started := b.rt.Clock.Now()
	if agent.stdin {
		err := boxlease.Write(att.Conn, boxlease.Payload{Record: files.record, HostKey: files.hostKey, WorkRoot: workRoot, FromCheckpoint: files.fromCheckpoint})
		if err == nil {
			err = att.CloseWrite()
		}
		if err != nil {
			return box{}, fmt.Errorf("hand the lease to the agent: %w", err)
		}
	}
	if err := b.awaitReady(ctx, att.Reader, func() { _ = att.Close() }); err != nil {
		return box{}, err
	}
	b.rt.Logger.Debug("docker box serving", "lease", files.leaseID,
		"copy", copied.Sub(began), "start", started.Sub(copied), "ready", b.rt.Clock.Since(started))
	found, err := b.boxes(ctx, labelLease+"="+files.leaseID)
	if err != nil {
		return box{}, err
	}
	for _, x := range found {
		if x.containerID != containerID {
			continue
		}
		if !x.running() || x.port == 0 {
			return box{}, fmt.Errorf("container %s is %s with SSH port published on %d", x.name, x.state, x.port)
		}
		return x, nil
	}
	return box{}, fmt.Errorf("container %s vanished after it started: %w", containerID, provider.ErrTransient)
}

// awaitReady reads the box's multiplexed output until the agent announces
// "ready <port>" on stdout; its stderr is quoted if it never does. It
// calls stop to end the output when ctx ends first.
func (b *Backend) awaitReady(ctx context.Context, output io.Reader, stop func()) error {
	stdoutR, stdoutW := io.Pipe()
	stderr := &tailBuffer{max: logTailBytes}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, err := stdcopy.StdCopy(stdoutW, stderr, output)
		stdoutW.CloseWithError(err)
	}()
	unblock := context.AfterFunc(ctx, func() { stop(); _ = stdoutR.Close() })
	defer func() {
		unblock()
		stop()
		_ = stdoutR.Close()
		<-copied
	}()
	line, err := bufio.NewReader(stdoutR).ReadString('\n')
	if rest, ok := strings.CutPrefix(line, "ready "); ok {
		if port, perr := strconv.Atoi(strings.TrimSpace(rest)); perr == nil {
			if port != sshPort {
				return fmt.Errorf("the agent serves on port %d, not %d", port, sshPort)
			}
			return nil
		}
	}
	switch {
	case ctx.Err() != nil:
		err = ctx.Err()
	case strings.TrimSpace(line) != "":
		err = fmt.Errorf("the agent said %q", strings.TrimSpace(line))
	case err == nil || errors.Is(err, io.EOF):
		err = errors.New("the container stopped before its agent was ready")
	}
	return fmt.Errorf("the box did not get ready (%w)%s", err, stderr.quote())
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Write(p)
	if extra := t.buf.Len() - t.max; extra > 0 {
		t.buf.Next(extra)
	}
	return len(p), nil
}

// quote returns the buffer for an error message, or "" when it is empty.
func (t *tailBuffer) quote() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(t.buf.String())
	if s == "" {
		return ""
	}
	return "; its output ends:\n" + s
}
