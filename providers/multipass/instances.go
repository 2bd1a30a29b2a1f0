package multipass

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/tagcloud"
)

// instances is the tag cloud API (tagcloud.API) on multipass: machines
// are instances named by their lease (tagcloud.Name), their tags are kept
// in the label store.
type instances struct {
	cli    cli
	labels LabelStore
	cfg    Config
	log    *slog.Logger
}

var _ tagcloud.API = (*instances)(nil)

// Create records the instance's labels, then launches it with the
// bootstrap as cloud-init user data. The labels come first,
// so that a launch whose answer is lost, or that fails half-way (the
// instance made but not running), leaves an instance the rollback finds
// by its lease. A launch that failed without making the instance removes
// the labels again.
func (a *instances) Create(ctx context.Context, s tagcloud.Spec) (tagcloud.Machine, error) {
	userData, err := cloudConfig(s.UserData)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	if err := a.labels.Write(s.Name, s.Tags); err != nil {
		return tagcloud.Machine{}, err
	}
	err = a.cli.launch(ctx, launchSpec{
		Name: s.Name, Image: a.cfg.Image, CPUs: a.cfg.CPUs, Memory: a.cfg.Memory, Disk: a.cfg.Disk,
		Timeout: a.cfg.LaunchTimeout, CloudInitStdin: userData,
	})
	if err != nil {
		a.forgetUnlaunched(ctx, s.Name)
		return tagcloud.Machine{}, fmt.Errorf("launch instance %s: %w", s.Name, err)
	}
	// The lifecycle reads it next, waiting for its address.
	return tagcloud.Machine{ID: s.Name, Tags: slices.Clone(s.Tags), Status: "launched"}, nil
}

// forgetUnlaunched removes the labels of instance name after a failed
// launch when multipass says there is no such instance. When the caller
// gave up (ctx ended), the daemon may still be making it, so the labels
// stay: then cleanup can see it.
func (a *instances) forgetUnlaunched(ctx context.Context, name string) {
	if ctx.Err() != nil {
		return
	}
	if _, err := a.cli.info(ctx, name); errors.Is(err, provider.ErrNotFound) {
		if err := a.labels.Remove(name); err != nil {
			a.log.Warn("multipass instance labels left behind", "instance", name, "err", err)
		}
	}
}

// machine is in as a machine with tags.
func (a *instances) machine(in instance, tags []string) tagcloud.Machine {
	m := tagcloud.Machine{ID: in.Name, Tags: tags, Status: strings.ToLower(in.State), Running: in.State == stateRunning}
	if len(in.IPv4) > 0 {
		m.IPv4 = in.IPv4[0] // the management address comes first
	}
	return m
}

// Get reads instance id (multipass info) and its labels.
func (a *instances) Get(ctx context.Context, id string) (tagcloud.Machine, error) {
	if !instanceName().MatchString(id) {
		return tagcloud.Machine{}, fmt.Errorf("instance %q is not a crabbox instance: %w", id, provider.ErrNotFound)
	}
	in, err := a.cli.info(ctx, id)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	tags, _, err := a.labels.Read(id)
	if err != nil {
		return tagcloud.Machine{}, err
	}
	return a.machine(in, tags), nil
}

// List returns the instances whose labels carry tag: every instance
// multipass lists with a crabbox name and an entry in the label store.
// Others (a user's own instances) are never returned.
func (a *instances) List(ctx context.Context, tag string) ([]tagcloud.Machine, error) {
	all, err := a.cli.list(ctx)
	if err != nil {
		return nil, err
	}
	var out []tagcloud.Machine
	for _, in := range all {
		if !instanceName().MatchString(in.Name) {
			continue
		}
		tags, ok, err := a.labels.Read(in.Name)
		if err != nil {
			a.log.Warn("multipass instance with unreadable labels left out", "instance", in.Name, "err", err)
			continue
		}
		if ok && slices.Contains(tags, tag) {
			out = append(out, a.machine(in, tags))
		}
	}
	return out, nil
}

// SetTags replaces the labels of m.
func (a *instances) SetTags(ctx context.Context, m tagcloud.Machine, tags []string) (tagcloud.Machine, error) {
	if err := ctx.Err(); err != nil {
		return tagcloud.Machine{}, err
	}
	if err := a.labels.Write(m.ID, tags); err != nil {
		return tagcloud.Machine{}, err
	}
	m.Tags = slices.Clone(tags)
	return m, nil
}

// Delete deletes and purges instance id, then removes its labels. One
// that is gone already counts as deleted.
func (a *instances) Delete(ctx context.Context, id string) error {
	if !instanceName().MatchString(id) {
		return fmt.Errorf("instance %q is not a crabbox instance", id)
	}
	if err := a.cli.delete(ctx, id); err != nil && !errors.Is(err, provider.ErrNotFound) {
		return err
	}
	return a.labels.Remove(id)
}

// launchCallTimeout bounds the launch call: multipass's own --timeout and
// a minute for the client to report it.
func launchCallTimeout(launch time.Duration) time.Duration { return launch + time.Minute }
