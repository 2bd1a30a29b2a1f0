package docker

import (
	"context"
	"fmt"

	"github.com/crabbox-dev/crabbox/provider"
	eng "github.com/crabbox-dev/crabbox/providers/docker/internal/engine"
)

// Doctor checks, without changing anything, that the engine answers and
// runs linux containers, that the box image is there, and that there is an
// agent executable for the engine's architecture.
func (b *Backend) Doctor(ctx context.Context) ([]provider.Check, error) {
	engine := provider.Check{Name: "docker engine"}
	v, err := b.cli.ServerVersion(ctx)
	switch {
	case err != nil:
		engine.Detail = fmt.Sprintf("%s does not answer: %v", b.cli.Host(), err)
		return []provider.Check{engine}, nil
	case v.Os != "linux":
		engine.Detail = fmt.Sprintf("%s runs %s containers; boxes need linux", b.cli.Host(), v.Os)
		return []provider.Check{engine}, nil
	}
	engine.OK = true
	engine.Detail = fmt.Sprintf("%s: engine %s (API %s), %s/%s", b.cli.Host(), v.Version, v.APIVersion, v.Os, v.Arch)

	image := provider.Check{Name: "box image", Detail: b.cfg.Image}
	if _, err := b.cli.ImageInspect(ctx, b.cfg.Image); err != nil {
		if eng.IsNotFound(err) {
			image.Detail = fmt.Sprintf("%s is not on the engine: make it with `crabbox image build --provider docker%s`", b.cfg.Image, tagFlag(b.cfg.Image))
		} else {
			image.Detail = fmt.Sprintf("%s: %v", b.cfg.Image, err)
		}
	} else {
		image.OK = true
	}

	agent := provider.Check{Name: "agent"}
	if path, err := b.agentPath(v.Arch); err != nil {
		agent.Detail = err.Error()
	} else {
		agent.OK, agent.Detail = true, path
	}
	return []provider.Check{engine, image, agent}, nil
}
