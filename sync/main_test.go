package sync

import (
	"os"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

func TestMain(m *testing.M) {
	// Keep the user's and the system's git configuration out of the tests.
	os.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	os.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	testenv.Main(m, nil, testsshd.Tests)
}
