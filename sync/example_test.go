package sync_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/crabbox-dev/crabbox/sync"
)

// exampleRepo makes a git checkout: two files, a subdirectory, a
// dependency directory the built-in excludes leave out, and a
// .crabboxignore.
func exampleRepo() string {
	dir, _ := os.MkdirTemp("", "crabbox-sync-example-")
	_ = exec.Command("git", "-C", dir, "init", "-q").Run()
	for name, content := range map[string]string{
		"go.mod":                    "module example.com/demo\n",
		"cmd/demo/main.go":          "package main\n\nfunc main() {}\n",
		"node_modules/left/out.js":  "// untracked, in a built-in exclude\n",
		"testdata/huge.bin":         "pretend this is large\n",
		".crabboxignore":            "testdata/huge.bin\n",
		"cmd/demo/testdata/in.json": "{}\n",
	} {
		path := filepath.Join(dir, filepath.FromSlash(name))
		_ = os.MkdirAll(filepath.Dir(path), 0o755)
		_ = os.WriteFile(path, []byte(content), 0o644)
	}
	return dir
}

// What a sync would send, computed without a box (crabbox sync-plan).
func ExampleMakePlan() {
	ctx := context.Background()
	repo := exampleRepo()
	defer os.RemoveAll(repo)

	plan, err := sync.MakePlan(ctx, repo)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("files:", plan.Files, "excluded:", plan.Excluded)
	for _, d := range plan.TopDirs { // largest first
		fmt.Println(d.Dir, d.Files, "files", d.Bytes, "bytes")
	}
	warning, err := plan.Check(sync.DefaultLimits())
	fmt.Printf("guardrails: %q %v\n", warning, err)
	// Output:
	// files: 4 excluded: 2
	// . 2 files 42 bytes
	// cmd 2 files 32 bytes
	// guardrails: "" <nil>
}

// A run from a subdirectory stands for the whole checkout: it is synced,
// and the command runs in the same subdirectory on the box.
func ExampleFindCheckout() {
	ctx := context.Background()
	repo := exampleRepo()
	defer os.RemoveAll(repo)

	co, err := sync.FindCheckout(ctx, filepath.Join(repo, "cmd", "demo"))
	if err != nil {
		fmt.Println(err)
		return
	}
	top, _ := filepath.EvalSymlinks(repo)
	fmt.Println(co.Root == top, co.InGit, co.Rel)
	// Output:
	// true true cmd/demo
}
