// Command testsummary reads `go test -json` on standard input and prints
// what plain `go test` prints (an ok line per passing package, the whole
// output of a failing one) plus the one-line summaries of test groups that
// skipped (internal/testenv), which plain `go test` hides for passing
// packages:
//
//	go test -race -json ./... | go run ./internal/cmd/testsummary
//
// It exits 1 when a package failed or did not build.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// SummaryPrefix is internal/testenv's.
const summaryPrefix = "crabbox: "

type event struct {
	Action     string
	Package    string
	ImportPath string
	Test       string
	Output     string
}

func main() {
	failed, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(1)
	}
	if failed {
		os.Exit(1)
	}
}

func summarize(r io.Reader, w io.Writer) (failed bool, err error) {
	outputs := map[string][]string{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(w, "%s\n", line) // not an event: go's own message
			continue
		}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Action == "build-fail":
			failed = true
		case e.Action == "output":
			outputs[e.Package] = append(outputs[e.Package], e.Output)
		case e.Test != "":
		case e.Action == "pass" || e.Action == "skip":
			for _, o := range outputs[e.Package] {
				if strings.HasPrefix(o, summaryPrefix) {
					fmt.Fprint(w, o)
				}
			}
			for _, o := range outputs[e.Package] {
				if strings.HasPrefix(o, "ok  ") || strings.HasPrefix(o, "?   ") {
					fmt.Fprint(w, o)
				}
			}
			delete(outputs, e.Package)
		case e.Action == "fail":
			failed = true
			for _, o := range outputs[e.Package] {
				fmt.Fprint(w, o)
			}
			delete(outputs, e.Package)
		}
	}
	return failed, sc.Err()
}
