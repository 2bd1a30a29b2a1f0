package run_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/run"
)

// run.Quote is internal/remote.Quote, whose tests cover the quoting rules;
// these check the exported command line and its round trip through sh.

func TestQuoteCommand(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{nil, ""},
		{[]string{"true"}, "true"},
		{[]string{"ls", "-l", "my dir"}, "ls -l 'my dir'"},
		{[]string{"echo", "it's", "$(id)", ""}, `echo 'it'\''s' '$(id)' ''`},
		{[]string{"if", "x"}, "'if' x"},     // a reserved word as the command is quoted
		{[]string{"echo", "if"}, "echo if"}, // but not as an argument
	}
	for _, tt := range tests {
		if got := run.QuoteCommand(tt.argv); got != tt.want {
			t.Errorf("QuoteCommand(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

// FuzzQuoteCommand checks that sh splits QuoteCommand(argv) back into
// exactly argv: it runs printf with the words, which prints each one
// followed by a NUL.
func FuzzQuoteCommand(f *testing.F) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		f.Skip("no sh")
	}
	for _, s := range []string{"", "a b", "it's", "''", `\'`, "$(id)", "`id`", "x\ny", "*", "~", "é\xff", "-n", "!", "if", "a=b", "#c", "\t", `\0`} {
		f.Add(s, "second word")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if strings.ContainsRune(a+b, 0) {
			t.Skip("arguments cannot hold NUL")
		}
		words := []string{a, b, a + "'" + b}
		line := run.QuoteCommand(append([]string{"printf", `%s\0`}, words...))
		out, err := exec.Command(sh, "-c", line).Output()
		if err != nil {
			t.Fatalf("sh -c %s: %v", line, err)
		}
		got := strings.Split(string(out), "\x00")
		if diff := cmp.Diff(words, got[:len(got)-1]); diff != "" {
			t.Errorf("sh split %s differently (-want +got):\n%s", line, diff)
		}
	})
}

func ExampleQuote() {
	dir := "/work/my project"
	fmt.Println("cd " + run.Quote(dir) + " && make")
	// Output:
	// cd '/work/my project' && make
}

// Building a command line for OpenSSH: ssh hands its command argument to
// the remote shell, which splits it into words again.
func ExampleQuoteCommand() {
	argv := []string{"grep", "-r", "it's done", "my notes/"}
	line := run.QuoteCommand(argv)
	fmt.Println(line)
	// exec.Command("ssh", "box.example", line) runs exactly argv there.
	// Output:
	// grep -r 'it'\''s done' 'my notes/'
}
