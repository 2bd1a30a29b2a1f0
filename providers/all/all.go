// Package all registers every built-in provider. Only main packages import
// it; library code never imports a concrete provider.
package all

import (
	_ "github.com/crabbox-dev/crabbox/providers/aws"
	_ "github.com/crabbox-dev/crabbox/providers/azure"
	_ "github.com/crabbox-dev/crabbox/providers/azuredynamicsessions"
	_ "github.com/crabbox-dev/crabbox/providers/daytona"
	_ "github.com/crabbox-dev/crabbox/providers/digitalocean"
	_ "github.com/crabbox-dev/crabbox/providers/docker"
	_ "github.com/crabbox-dev/crabbox/providers/e2b"
	_ "github.com/crabbox-dev/crabbox/providers/external"
	_ "github.com/crabbox-dev/crabbox/providers/gcp"
	_ "github.com/crabbox-dev/crabbox/providers/hetzner"
	_ "github.com/crabbox-dev/crabbox/providers/kubernetes"
	_ "github.com/crabbox-dev/crabbox/providers/kubevirt"
	_ "github.com/crabbox-dev/crabbox/providers/linode"
	_ "github.com/crabbox-dev/crabbox/providers/local"
	_ "github.com/crabbox-dev/crabbox/providers/modal"
	_ "github.com/crabbox-dev/crabbox/providers/multipass"
	_ "github.com/crabbox-dev/crabbox/providers/nvidiabrev"
	_ "github.com/crabbox-dev/crabbox/providers/opensandbox"
	_ "github.com/crabbox-dev/crabbox/providers/proxmox"
	_ "github.com/crabbox-dev/crabbox/providers/runpod"
	_ "github.com/crabbox-dev/crabbox/providers/scaleway"
	_ "github.com/crabbox-dev/crabbox/providers/ssh"
	_ "github.com/crabbox-dev/crabbox/providers/tensorlake"
	_ "github.com/crabbox-dev/crabbox/providers/upstashbox"
	_ "github.com/crabbox-dev/crabbox/providers/vercel"
	_ "github.com/crabbox-dev/crabbox/providers/vultr"
)
