package scaleway_test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

func runGit(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	return cmd.Run()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func strconvUnix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
