package main

import (
	"os"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/clitest"
	"github.com/crabbox-dev/crabbox/internal/testenv"
)

// The test binary doubles as crabbox-coordinator: with
// CRABBOX_TEST_MAIN=1 it runs the program. Tests start it as separate
// processes, as users and service managers do.
func TestMain(m *testing.M) {
	if os.Getenv("CRABBOX_TEST_MAIN") == "1" {
		main() // exits
	}
	testenv.Main(m, nil)
}

// coordinatorCmd runs the program as a separate process with env added to
// the test's environment.
func coordinatorCmd(t *testing.T, env []string, args ...string) clitest.Result {
	t.Helper()
	return clitest.Command(os.Args[0], append([]string{"CRABBOX_TEST_MAIN=1"}, env...))(t, "", args...)
}

var testSecret = strings.Repeat("k", 40)
