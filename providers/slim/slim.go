// Package slim registers the crabbox command's providers: the same names,
// aliases, options and features as providers/all, but without linking any
// cloud SDK, so that the command starts fast and builds quickly.
//
// The providers that need no SDK (imported below for their registration:
// local, ssh, docker, external, the sandboxes speaking plain HTTP, the GPU
// clouds) are linked in-process. Each provider whose client is large (the VM
// clouds aws, azure, gcp, hetzner, digitalocean, linode, proxmox, scaleway,
// vultr, and others) is registered with its
// Spec from its light <name>spec package and served by its provider
// program, crabbox-provider-<name> (cmd/crabbox-provider-<name>), over the
// external provider protocol (providers/external.Plugin). The programs are
// found next to the running executable, then on PATH; `go install ./cmd/...`
// installs them all together.
//
// Only main packages import it. A program imports either providers/all
// (every provider in-process, for Go embedders and the coordinator) or
// providers/slim, never both: they register the same names, and a
// duplicate registration panics.
package slim

import (
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws/awsspec"
	"github.com/crabbox-dev/crabbox/providers/azure/azurespec"
	"github.com/crabbox-dev/crabbox/providers/azuredynamicsessions/azuredynamicsessionsspec"
	_ "github.com/crabbox-dev/crabbox/providers/daytona"
	"github.com/crabbox-dev/crabbox/providers/digitalocean/digitaloceanspec"
	_ "github.com/crabbox-dev/crabbox/providers/docker"
	_ "github.com/crabbox-dev/crabbox/providers/e2b"
	"github.com/crabbox-dev/crabbox/providers/external"
	"github.com/crabbox-dev/crabbox/providers/gcp/gcpspec"
	"github.com/crabbox-dev/crabbox/providers/hetzner/hetznerspec"
	"github.com/crabbox-dev/crabbox/providers/kubernetes/kubernetesspec"
	"github.com/crabbox-dev/crabbox/providers/kubevirt/kubevirtspec"
	"github.com/crabbox-dev/crabbox/providers/linode/linodespec"
	_ "github.com/crabbox-dev/crabbox/providers/local"
	"github.com/crabbox-dev/crabbox/providers/modal/modalspec"
	_ "github.com/crabbox-dev/crabbox/providers/multipass"
	_ "github.com/crabbox-dev/crabbox/providers/nvidiabrev"
	_ "github.com/crabbox-dev/crabbox/providers/opensandbox"
	"github.com/crabbox-dev/crabbox/providers/proxmox/proxmoxspec"
	_ "github.com/crabbox-dev/crabbox/providers/runpod"
	"github.com/crabbox-dev/crabbox/providers/scaleway/scalewayspec"
	_ "github.com/crabbox-dev/crabbox/providers/ssh"
	_ "github.com/crabbox-dev/crabbox/providers/tensorlake"
	_ "github.com/crabbox-dev/crabbox/providers/upstashbox"
	_ "github.com/crabbox-dev/crabbox/providers/vercel"
	"github.com/crabbox-dev/crabbox/providers/vultr/vultrspec"
)

// ProgramPrefix starts the file name of every provider program:
// crabbox-provider-<provider name>.
const ProgramPrefix = "crabbox-provider-"

// Clouds are the Specs of the providers served by their programs (the VM
// clouds, and the providers whose client is as large), in the order of
// their names.
func Clouds() []provider.Spec {
	return []provider.Spec{
		awsspec.Spec(), azurespec.Spec(), azuredynamicsessionsspec.Spec(), digitaloceanspec.Spec(), gcpspec.Spec(),
		hetznerspec.Spec(), kubernetesspec.Spec(), kubevirtspec.Spec(), linodespec.Spec(), modalspec.Spec(), proxmoxspec.Spec(),
		scalewayspec.Spec(), vultrspec.Spec(),
	}
}

// Program is the file name of the provider program serving the provider
// named name.
func Program(name string) string { return ProgramPrefix + name }

func init() {
	for _, spec := range Clouds() {
		provider.Register(external.Plugin(spec, Program(spec.Name)))
	}
}
