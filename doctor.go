package crabbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"

	"github.com/crabbox-dev/crabbox/provider"
)

// Check is one doctor check's outcome.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// DoctorOptions shape the doctor's checks.
type DoctorOptions struct {
	// Provider is the provider to check; empty means the client's.
	Provider string
}

// Doctor runs cheap checks that change nothing (beyond a temporary file in
// the state directory): the state directory is writable, git is installed,
// the provider configures, and the provider's own checks if it has any.
// A failed check is a result, not an error.
func (c *Client) Doctor(ctx context.Context, opts DoctorOptions) []Check {
	checks := []Check{c.checkStateDir(), checkGit()}
	name := opts.Provider
	if name == "" {
		name = c.provider
	}
	b, err := c.Backend(name)
	if err != nil {
		return append(checks, Check{Name: "provider " + name, Detail: err.Error()})
	}
	spec := b.Spec()
	checks = append(checks, Check{Name: "provider " + name, OK: true, Detail: fmt.Sprintf("%s (%s) configures", spec.Name, spec.Kind)})
	db, ok := b.(provider.DoctorBackend)
	if !ok {
		return checks
	}
	pc, err := db.Doctor(ctx)
	if err != nil {
		return append(checks, Check{Name: spec.Name + " checks", Detail: err.Error()})
	}
	for _, ch := range pc {
		checks = append(checks, Check{Name: spec.Name + ": " + ch.Name, OK: ch.OK, Detail: ch.Detail})
	}
	return checks
}

func (c *Client) checkStateDir() Check {
	dir := c.store.Dir()
	ch := Check{Name: "state directory"}
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

func checkGit() Check {
	path, err := exec.LookPath("git")
	if err != nil {
		return Check{Name: "git", Detail: "git not found on PATH: crabbox needs it to list the checkout"}
	}
	return Check{Name: "git", OK: true, Detail: path}
}
