package crabbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/crabbox-dev/crabbox/provider"
)

// DoctorOptions shape the doctor's checks.
type DoctorOptions struct {
	// Provider is the provider to check; empty means the client's.
	Provider string
}

// Doctor runs cheap checks that change nothing (beyond a temporary file in
// the state directory): the state directory is writable, no lease claim is
// damaged (each damaged one is a failed check saying what to do), git is
// installed, the provider configures, and the provider's own checks if it
// has any. A failed check is a result, not an error.
func (c *Client) Doctor(ctx context.Context, opts DoctorOptions) []provider.Check {
	if err := c.ready(ctx, "doctor"); err != nil {
		return []provider.Check{{Name: "crabbox client", Detail: err.Error()}}
	}
	name := opts.Provider
	if name == "" {
		name = c.provider
	}
	checks := append([]provider.Check{c.checkStateDir()}, c.checkClaims(name)...)
	checks = append(checks, checkGit())
	b, err := c.Backend(name)
	if err != nil {
		return append(checks, provider.Check{Name: "provider " + name, Detail: err.Error()})
	}
	spec := b.Spec()
	checks = append(checks, provider.Check{Name: "provider " + name, OK: true, Detail: fmt.Sprintf("%s (%s) configures", spec.Name, spec.Kind)})
	db, ok := b.(provider.DoctorBackend)
	if !ok {
		return checks
	}
	pc, err := db.Doctor(ctx)
	if err != nil {
		return append(checks, provider.Check{Name: spec.Name + " checks", Detail: err.Error()})
	}
	for _, ch := range pc {
		checks = append(checks, provider.Check{Name: spec.Name + ": " + ch.Name, OK: ch.OK, Detail: ch.Detail})
	}
	return checks
}

func (c *Client) checkStateDir() provider.Check {
	dir := c.store.Dir()
	ch := provider.Check{Name: "state directory"}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		ch.Detail = fmt.Sprintf("%s is not writable: %v", dir, err)
		return ch
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		ch.Detail = fmt.Sprintf("remove test file in %s: %v", dir, err)
		return ch
	}
	ch.OK, ch.Detail = true, dir+" is writable"
	return ch
}

// checkClaims reports the lease store's damaged claims, one failed check
// each; the lease of one is released by Stop at the provider that made it.
func (c *Client) checkClaims(name string) []provider.Check {
	damaged, err := c.store.Damaged()
	if err != nil {
		return []provider.Check{{Name: "lease claims", Detail: err.Error()}}
	}
	if len(damaged) == 0 {
		return []provider.Check{{Name: "lease claims", OK: true, Detail: "none damaged"}}
	}
	var out []provider.Check
	for _, d := range damaged {
		out = append(out, provider.Check{Name: "lease claim " + d.ID, Detail: fmt.Sprintf(
			"damaged (%v), kept as %s; its box is still yours: `crabbox stop %s` releases it and drops the file "+
				"(add --provider P unless provider %q made it); if no provider has it any more, remove the file",
			d.Err, d.Path, d.ID, name)})
	}
	return out
}

func checkGit() provider.Check {
	path, err := exec.LookPath("git")
	if err != nil {
		return provider.Check{Name: "git", Detail: "git not found on PATH: crabbox needs it to list the checkout"}
	}
	return provider.Check{Name: "git", OK: true, Detail: path}
}
