package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run forwards a piped stdin to the command, which sees its end; -n and
// --no-stdin leave the command's stdin empty.
func TestRunForwardsStdin(t *testing.T) {
	t.Parallel()
	env, repo := stateEnv(t), gitRepo(t)
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"cat", "hello\n", []string{"--", "cat"}, "hello\n"},
		{"wc -l", "a\nb\n", []string{"--", "wc", "-l"}, "2"},
		{"shell", "x\ny\nz\n", []string{"--shell", "wc -l"}, "3"},
		{"-n", "a\nb\n", []string{"-n", "--", "wc", "-c"}, "0"},
		{"--no-stdin", "a\nb\n", []string{"--no-stdin", "--", "wc", "-c"}, "0"},
		{"/dev/null", "", []string{"--", "wc", "-c"}, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, env, repo, tt.stdin, append([]string{"run", "--quiet"}, tt.args...)...)
			if r.code != 0 || strings.TrimSpace(r.stdout) != strings.TrimSpace(tt.want) {
				t.Errorf("run %q with stdin %q: exit %d, stdout %q, stderr %q; want 0 and %q", tt.args, tt.stdin, r.code, r.stdout, r.stderr, tt.want)
			}
		})
	}
}

func TestForwardedStdin(t *testing.T) {
	file := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(file, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	regular, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer regular.Close()
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	dir, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	reader := strings.NewReader("in")
	tests := []struct {
		name string
		in   io.Reader
		want io.Reader
	}{
		{"regular file", regular, regular},
		{"pipe", pr, pr},
		{"reader", reader, reader},
		{"/dev/null", devNull, nil},
		{"directory", dir, nil},
		{"nil", nil, nil},
	}
	for _, tt := range tests {
		if got := forwardedStdin(tt.in); got != tt.want {
			t.Errorf("forwardedStdin(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
