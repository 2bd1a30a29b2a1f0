package cloud_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, containerTests) }

// containerTests run the bootstrap in a Debian container.
var containerTests = &testenv.Group{Name: "cloud-init container", Enable: "bash .ci/setup.d/30-cloudinit-image.sh, as root"}
