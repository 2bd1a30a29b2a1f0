package proxmox_test

import (
	"net/http/httptest"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
	"github.com/crabbox-dev/crabbox/providers/proxmox"
	"github.com/crabbox-dev/crabbox/providers/proxmox/internal/fakeproxmox"
)

// TestInstalledCLI runs the provider as a user does: the crabbox command
// and crabbox-provider-proxmox built and installed side by side, `crabbox
// run --provider proxmox` against the fake cluster, with the provider in
// its own process and the API URL from PROXMOX_VE_ENDPOINT. The fake's
// VMs are reachable for real (a loopback fleet: every VM its own
// 127.x.y.z address, sshd on port 2222 there).
func TestInstalledCLI(t *testing.T) {
	fleet := cloudtest.NewLoopbackFleet(t)
	// The defaults: node pve, template 9000.
	fake := fakeproxmox.New(fleet, testToken, proxmox.DefaultNodes)
	fake.AddTemplate(template, proxmox.DefaultNodes, "debian-12-cloudinit")
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	run := cloudtest.InstalledCLI(t, "proxmox", proxmox.TokenEnv+"="+testToken, proxmox.EndpointEnv+"="+srv.URL)
	flags := []string{"--provider", "proxmox", "--proxmox-work-root", t.TempDir()}

	cloudtest.CLIRuns(t, run, "proxmox", flags, func(t *testing.T) {
		if s := fake.Starts(); len(s) != 1 {
			t.Errorf("VM starts %+v, want one", s)
		}
	}, func(t *testing.T) {
		if vms := fake.VMs(); len(vms) != 0 {
			t.Errorf("VMs left: %+v", vms)
		}
		if r := fleet.Running(); len(r) != 0 {
			t.Errorf("boxes still running: %v", r)
		}
	})
}
