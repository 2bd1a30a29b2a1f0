package main

import (
	"fmt"

	"github.com/crabbox-dev/crabbox/run/junit"
)

// printJUnit reports broken JUnit files (always) and the counts (unless
// quiet) on stderr.
func (a *app) printJUnit(rep junit.Report, quiet bool) {
	for _, b := range rep.Broken {
		fmt.Fprintf(a.stderr, "crabbox: junit: skipped %s: %s\n", b.File, b.Err)
	}
	if quiet {
		return
	}
	fmt.Fprintf(a.stderr, "crabbox: junit: %d files · tests=%d failures=%d errors=%d skipped=%d\n",
		len(rep.Files), rep.Tests, rep.Failures, rep.Errors, rep.Skipped)
}
