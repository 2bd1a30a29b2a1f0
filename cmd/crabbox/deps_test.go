package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// forbiddenDeps are the module path prefixes the crabbox command must not
// link: every package linked runs its init at each start, and these are
// the heavy ones (the cloud SDKs, served by the crabbox-provider-<name>
// programs instead, and what moby's engine client brought along).
var forbiddenDeps = []struct{ prefix, why string }{
	{"cloud.google.com/go", "the gcp provider's SDK (crabbox-provider-gcp)"},
	{"google.golang.org/api", "the gcp provider's SDK (crabbox-provider-gcp)"},
	{"google.golang.org/grpc", "gRPC, which only the gcp and modal SDKs need"},
	{"github.com/aws/", "the aws provider's SDK (crabbox-provider-aws)"},
	{"github.com/Azure/", "the azure provider's SDK (crabbox-provider-azure)"},
	{"github.com/hetznercloud/", "the hetzner provider's SDK (crabbox-provider-hetzner)"},
	{"github.com/digitalocean/godo", "the digitalocean provider's SDK (crabbox-provider-digitalocean)"},
	{"github.com/linode/", "the linode provider's SDK (crabbox-provider-linode)"},
	{"github.com/luthermonson/go-proxmox", "the proxmox provider's client (crabbox-provider-proxmox)"},
	{"github.com/modal-labs/", "the modal provider's SDK (crabbox-provider-modal)"},
	{"k8s.io/", "the kubernetes provider's client-go (crabbox-provider-kubernetes)"},
	{"sigs.k8s.io/", "client-go's helpers (crabbox-provider-kubernetes)"},
	{"github.com/scaleway/", "the scaleway provider's SDK (crabbox-provider-scaleway)"},
	{"github.com/vultr/", "the vultr provider's SDK (crabbox-provider-vultr)"},
	{"github.com/distribution/reference", "image reference parsing, whose package init compiles regexps at every start (the docker provider checks names itself)"},
	{"github.com/opencontainers/go-digest", "digest parsing, whose package init compiles regexps at every start"},
	{"go.opentelemetry.io/", "OpenTelemetry, which moby's engine client pulled in (the docker provider speaks the Engine API itself)"},
}

// The crabbox command links none of the forbidden modules, so that its
// start stays cheap; the clouds reach it through their programs.
func TestCommandLinksNoCloudSDK(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("listing the command's dependencies needs the go command on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// -deps lists what the command's binary links (its tests excluded).
	out, err := exec.CommandContext(ctx, goTool, "list", "-deps", "github.com/crabbox-dev/crabbox/cmd/crabbox").Output()
	if err != nil {
		if exit, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list -deps: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list -deps: %v", err)
	}
	pkgs := strings.Fields(string(out))
	if len(pkgs) == 0 {
		t.Fatal("go list -deps printed no package")
	}
	for _, pkg := range pkgs {
		for _, f := range forbiddenDeps {
			if strings.HasPrefix(pkg, f.prefix) {
				t.Errorf("crabbox links %s: %s must stay out of the command", pkg, f.why)
			}
		}
	}
}
