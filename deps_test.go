package crabbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencyDirection holds the layering of DESIGN.md: no library
// package depends on a concrete provider, on cmd/, or on a CLI-only module,
// and package crabbox does not depend on package config (which imports it).
func TestDependencyDirection(t *testing.T) {
	const module = "github.com/crabbox-dev/crabbox"
	forbidden := []string{
		module + "/providers/",
		module + "/cmd/",
		module + "/examples/",
		"github.com/peterbourgon/ff",
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, deps := fields[0], fields[1:]
		if isConsumer(module, pkg) {
			continue
		}
		checked++
		if pkg == module {
			// config builds crabbox options; crabbox itself never reads
			// the user's settings, its caller passes them.
			for _, dep := range deps {
				if dep == module+"/config" {
					t.Errorf("package crabbox depends on %s; only its callers may", dep)
				}
			}
		}
		for _, dep := range deps {
			for _, bad := range forbidden {
				if strings.HasPrefix(dep, bad) {
					t.Errorf("library package %s depends on %s", pkg, dep)
				}
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d library packages; go list output looks wrong:\n%s", checked, out)
	}
}

// isConsumer reports whether pkg may import providers and CLI libraries:
// main packages, examples, benchmarks, the providers themselves, and
// crabboxtest, whose boxes come from the local provider by default (only
// tests import it).
func isConsumer(module, pkg string) bool {
	if pkg == module+"/crabboxtest" {
		return true
	}
	for _, prefix := range []string{"/cmd/", "/examples/", "/providers/", "/bench/"} {
		if strings.HasPrefix(pkg, module+prefix) {
			return true
		}
	}
	return false
}
