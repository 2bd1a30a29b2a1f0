package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// serverOnly are the packages (and, for module paths, everything under
// them) of the coordinator server that the CLI must not link: every
// command would pay their initialisation at start. `crabbox coordinator`
// runs the crabbox-coordinator program instead; the CLI keeps the client
// side (coordinator/client, api, auth's token parsing, broker).
var serverOnly = []struct {
	path string
	tree bool // and the packages under it
}{
	{"github.com/crabbox-dev/crabbox/coordinator", false},
	{"github.com/crabbox-dev/crabbox/coordinator/store/sqlite", true},
	{"github.com/crabbox-dev/crabbox/coordinator/store/postgres", true},
	{"github.com/crabbox-dev/crabbox/coordinator/portal", true},
	{"modernc.org/sqlite", true},
	{"github.com/jackc/pgx", true},
	{"github.com/prometheus", true},
}

// cloudSDKs import some of serverOnly themselves (hcloud instruments with
// prometheus). Whether the CLI links a cloud SDK is deps_test.go's
// concern; here a serverOnly package that only a cloud SDK brings in is
// logged, not failed.
var cloudSDKs = []string{"github.com/hetznercloud/"}

func TestCLIDoesNotLinkTheCoordinatorServer(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH: cannot list the CLI's dependencies")
	}
	out, err := exec.Command(goTool, "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "github.com/crabbox-dev/crabbox/cmd/crabbox").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/crabbox: %v", err)
	}
	importers := map[string][]string{}
	var deps []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps = append(deps, f[0])
		for _, imp := range f[1:] {
			importers[imp] = append(importers[imp], f[0])
		}
	}
	forbidden := func(dep string) bool {
		return slices.ContainsFunc(serverOnly, func(s struct {
			path string
			tree bool
		}) bool {
			return dep == s.path || s.tree && strings.HasPrefix(dep, s.path+"/")
		})
	}
	for _, dep := range deps {
		if !forbidden(dep) {
			continue
		}
		// Who brings it in from outside the forbidden set.
		var from []string
		for _, imp := range importers[dep] {
			if !forbidden(imp) {
				from = append(from, imp)
			}
		}
		bySDK := len(from) > 0 && !slices.ContainsFunc(from, func(imp string) bool {
			return !slices.ContainsFunc(cloudSDKs, func(sdk string) bool { return strings.HasPrefix(imp, sdk) })
		})
		switch {
		case bySDK:
			t.Logf("crabbox links %s, through the cloud SDK %v only", dep, from)
		case len(from) > 0:
			t.Errorf("crabbox links %s, a coordinator server package, imported by %v", dep, from)
		}
	}
}
