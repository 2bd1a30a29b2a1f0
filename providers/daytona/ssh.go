package daytona

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
)

// SSH mode defaults.
const (
	// DefaultSSHGateway is the hosted service's SSH gateway, the host and
	// port of SSH-mode lease targets when no ssh-gateway is configured.
	DefaultSSHGateway = "ssh.app.daytona.io:22"
	// DefaultSSHUser is a sandbox's OS user when Daytona reports none.
	DefaultSSHUser = "daytona"
	// maxSSHAccess is the longest SSH access SSHLogin asks for.
	maxSSHAccess = 24 * time.Hour
)

// SSHBackend is the Daytona provider in SSH mode: an SSH-lease backend
// whose sandboxes are reached through Daytona's SSH gateway. The gateway
// takes a short-lived access token as the SSH user name, so the lease
// targets name the sandbox's OS user (for display) and SSHLogin mints a
// token per connection (provider.SSHLoginBackend); crabbox never stores
// it. Sandboxes are made, labelled, touched, listed, cleaned up and
// deleted exactly as in delegated mode (Backend), so both modes see the
// same leases.
type SSHBackend struct {
	b *Backend
}

// NewSSH returns an SSH-mode backend for cfg. It makes no API call.
func NewSSH(cfg Config, rt provider.Runtime) (*SSHBackend, error) {
	b, err := New(cfg, rt)
	if err != nil {
		return nil, err
	}
	return &SSHBackend{b: b}, nil
}

// Spec describes the Daytona provider in SSH mode: an SSH-lease provider
// whose logins are minted per connection.
func (s *SSHBackend) Spec() provider.Spec {
	spec := Provider{}.Spec()
	spec.Kind = provider.KindSSHLease
	spec.Features = []provider.Feature{
		provider.FeatureSSH, provider.FeatureSSHLogin, provider.FeaturePTY,
		provider.FeatureSelfExpiry, provider.FeatureCleanup, provider.FeatureDoctor,
	}
	return spec
}

// Acquire creates the lease's sandbox as Warmup does (labelled, started,
// its work root recorded, ready), and deletes it again if any step fails.
// req.PublicKey is not installed: the gateway's token is the credential.
func (s *SSHBackend) Acquire(ctx context.Context, req provider.AcquireRequest) (provider.LeaseTarget, error) {
	sb, err := s.b.start(ctx, provider.WarmupRequest{
		LeaseID: req.LeaseID, Slug: req.Slug, TTL: req.TTL, IdleTimeout: req.IdleTimeout,
		ExpiresAt: req.ExpiresAt, Labels: req.Labels,
	})
	if err == nil {
		var t provider.LeaseTarget
		if t, err = s.target(sb); err == nil {
			s.b.rt.Logger.Info("daytona sandbox ready for SSH", "lease", req.LeaseID, "sandbox", sb.ID)
			return t, nil
		}
		// Labels that do not read back: nothing can use the sandbox.
		err = errors.Join(err, s.b.deleteOrMark(context.WithoutCancel(ctx), sb.ID))
	}
	return provider.LeaseTarget{}, fmt.Errorf("daytona acquire %s: %w", req.LeaseID, err)
}

// target is the lease target of one of this provider's sandboxes: the
// gateway's address and the sandbox's OS user, never a token.
func (s *SSHBackend) target(sb sandbox) (provider.LeaseTarget, error) {
	v, err := s.b.view(sb)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	if v.WorkRoot == "" {
		return provider.LeaseTarget{}, fmt.Errorf("sandbox %s has no %s label", sb.ID, LabelWorkRoot)
	}
	gateway := s.b.cfg.SSHGateway
	if gateway == "" {
		gateway = DefaultSSHGateway
	}
	host, port, err := splitGateway(gateway)
	if err != nil {
		return provider.LeaseTarget{}, err
	}
	user := sb.User
	if user == "" {
		user = DefaultSSHUser
	}
	return provider.LeaseTarget{
		LeaseID: v.ID, Slug: v.Slug, Provider: Name, CloudID: sb.ID, Host: host, Port: port, User: user,
		WorkRoot: v.WorkRoot, State: v.State, Labels: v.Labels, CreatedAt: v.CreatedAt, ExpiresAt: v.ExpiresAt,
	}, nil
}

// Resolve finds the live lease with the ID or slug req.ID.
func (s *SSHBackend) Resolve(ctx context.Context, req provider.ResolveRequest) (provider.LeaseTarget, error) {
	sb, err := s.b.find(ctx, req.ID)
	if err == nil {
		var t provider.LeaseTarget
		if t, err = s.target(sb); err == nil {
			return t, nil
		}
	}
	return provider.LeaseTarget{}, fmt.Errorf("daytona resolve %s: %w", req.ID, err)
}

// List returns every sandbox with this provider's ownership labels,
// whoever made it and in whichever mode. Sandboxes whose labels do not
// parse are logged and left out.
func (s *SSHBackend) List(ctx context.Context, _ provider.ListRequest) ([]provider.LeaseTarget, error) {
	all, err := s.b.list(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("daytona list: %w", err)
	}
	out := make([]provider.LeaseTarget, 0, len(all))
	for _, sb := range all {
		t, err := s.target(sb)
		if err != nil {
			s.b.rt.Logger.Warn("daytona sandbox with unreadable labels", "sandbox", sb.ID, "err", err)
			continue
		}
		out = append(out, t)
	}
	return out, nil
}

// Touch moves the sandbox's auto-stop interval and labels so that it
// lives until at least req.ExpiresAt (see Backend.Touch).
func (s *SSHBackend) Touch(ctx context.Context, req provider.TouchRequest) (provider.LeaseTarget, error) {
	sb, err := s.b.touch(ctx, provider.DelegatedTouchRequest{ID: req.Lease.LeaseID, Now: req.Now, ExpiresAt: req.ExpiresAt})
	if err == nil {
		var t provider.LeaseTarget
		if t, err = s.target(sb); err == nil {
			return t, nil
		}
	}
	return provider.LeaseTarget{}, fmt.Errorf("daytona touch %s: %w", req.Lease.LeaseID, err)
}

// ReleaseLease deletes the lease's sandbox; one that is gone is released.
func (s *SSHBackend) ReleaseLease(ctx context.Context, req provider.ReleaseRequest) error {
	return s.b.Stop(ctx, provider.StopRequest{ID: req.Lease.LeaseID})
}

// Cleanup sweeps expired sandboxes as in delegated mode (Backend.Cleanup).
func (s *SSHBackend) Cleanup(ctx context.Context, req provider.CleanupRequest) ([]provider.CleanupDecision, error) {
	return s.b.Cleanup(ctx, req)
}

// Doctor runs the delegated mode's checks (Backend.Doctor): the API and
// the key, and the snapshot if one is configured.
func (s *SSHBackend) Doctor(ctx context.Context) ([]provider.Check, error) {
	return s.b.Doctor(ctx)
}

// sshAccess is Daytona's SshAccessDto, as far as it is used.
type sshAccess struct {
	Token      string `json:"token"`
	ExpiresAt  string `json:"expiresAt"`
	SSHCommand string `json:"sshCommand"`
}

// SSHLogin mints an SSH access token of the lease's sandbox, valid for
// req.ValidFor rounded up to whole minutes (at least one, at most a day;
// Daytona's default of an hour when zero), and returns the gateway to
// connect to with the token as user: the configured ssh-gateway, or the
// host and port of the access's sshCommand. Neither the token nor the
// command is ever part of an error or a log.
func (s *SSHBackend) SSHLogin(ctx context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	login, err := s.sshLogin(ctx, req)
	if err != nil {
		return provider.SSHLogin{}, fmt.Errorf("daytona SSH access to %s: %w", req.Lease.LeaseID, err)
	}
	return login, nil
}

func (s *SSHBackend) sshLogin(ctx context.Context, req provider.SSHLoginRequest) (provider.SSHLogin, error) {
	ref := req.Lease.CloudID
	if ref == "" {
		ref = sandboxName(req.Lease.LeaseID)
	}
	minutes := 60
	if req.ValidFor > 0 {
		minutes = int((min(req.ValidFor, maxSSHAccess) + time.Minute - 1) / time.Minute)
	}
	q := url.Values{"expiresInMinutes": {strconv.Itoa(minutes)}}
	var acc sshAccess
	if err := s.b.api.json(ctx, "create SSH access", request{method: http.MethodPost, url: withQuery(s.b.api.api("sandbox", ref, "ssh-access"), q)}, &acc); err != nil {
		return provider.SSHLogin{}, err
	}
	if acc.Token == "" || strings.ContainsFunc(acc.Token, func(r rune) bool { return r <= ' ' || r == '@' || r == 0x7f }) {
		return provider.SSHLogin{}, errors.New("the answer has no usable token")
	}
	gateway := s.b.cfg.SSHGateway
	if gateway == "" {
		var err error
		if gateway, err = gatewayOf(acc.SSHCommand); err != nil {
			return provider.SSHLogin{}, err
		}
	}
	host, port, err := splitGateway(gateway)
	if err != nil {
		return provider.SSHLogin{}, fmt.Errorf("the gateway: %w", err)
	}
	login := provider.SSHLogin{Host: host, Port: port, User: acc.Token}
	if t, err := time.Parse(time.RFC3339Nano, acc.ExpiresAt); err == nil {
		login.ExpiresAt = t
	}
	return login, nil
}

// gatewayOf is the host:port an SSH access's command connects to: `ssh
// [options] TOKEN@HOST`, with -p PORT (or -pPORT) for a port other than
// 22. Its errors never quote the command, which holds the token.
func gatewayOf(command string) (string, error) {
	words := strings.Fields(command)
	if len(words) < 2 || words[0] != "ssh" {
		return "", errors.New("the SSH access's command is not an ssh command line (set ssh-gateway to the gateway's host:port)")
	}
	host, port := "", "22"
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "-p" && i+1 < len(words):
			i++
			port = words[i]
		case strings.HasPrefix(w, "-p") && len(w) > 2:
			port = w[2:]
		case w == "-o" && i+1 < len(words):
			i++
		case strings.HasPrefix(w, "-"):
		case strings.Contains(w, "@") && host == "":
			host = w[strings.LastIndex(w, "@")+1:]
		}
	}
	if host == "" {
		return "", errors.New("the SSH access's command names no user@host (set ssh-gateway to the gateway's host:port)")
	}
	return net.JoinHostPort(host, port), nil
}

// splitGateway parses host:port, naming what is wrong (the value is never
// a secret).
func splitGateway(gateway string) (string, int, error) {
	host, portText, err := net.SplitHostPort(gateway)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", gateway)
	}
	port, err := strconv.Atoi(portText)
	if host == "" || strings.ContainsAny(host, "@/ ") || err != nil || port <= 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q is not host:port with a port from 1 to 65535", gateway)
	}
	return host, port, nil
}
