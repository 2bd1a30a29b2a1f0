package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/cmd/internal/coordinatorcmd"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ with the current output")

// TestGoldenHelp pins the help of the program and of each of its commands,
// and checks that each has an example.
func TestGoldenHelp(t *testing.T) {
	example := regexp.MustCompile(`(?m)^  (\S+=\S+ )?crabbox-coordinator\b`)
	for _, words := range [][]string{nil, {"serve"}, {"token"}, {"token", "issue"}} {
		name := "help-" + strings.Join(append([]string{"crabbox-coordinator"}, words...), "-")
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := coordinatorcmd.Main(context.Background(), append(words, "--help"), &stdout, &stderr)
			if code != 0 || stderr.String() != "" {
				t.Fatalf("%v --help: exit %d, stderr %q", words, code, stderr.String())
			}
			if !example.MatchString(stdout.String()) {
				t.Errorf("%v --help has no example (an indented crabbox-coordinator command line)", words)
			}
			path := filepath.Join("testdata", "help", name+".golden")
			if *update {
				if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/crabbox-coordinator -run Golden -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), stdout.String()); diff != "" {
				t.Errorf("%s differs (-want +got):\n%s", path, diff)
			}
		})
	}
}

// A usage mistake exits 2 with the error and a usage line on stderr.
func TestUsageErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serv"}, `crabbox-coordinator: unknown command "serv"; did you mean "serve"?`},
		{[]string{"serve", "--lisen", "x"}, "crabbox-coordinator serve: unknown flag --lisen; did you mean --listen?"},
		{[]string{"serve", "extra"}, `coordinator serve: unexpected arguments ["extra"]`},
	} {
		var stdout, stderr bytes.Buffer
		code := coordinatorcmd.Main(context.Background(), tt.args, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), tt.msg) || stdout.String() != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 with %q", tt.args, code, stdout.String(), stderr.String(), tt.msg)
		}
	}
}
