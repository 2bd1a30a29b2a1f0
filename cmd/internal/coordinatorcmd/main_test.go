package coordinatorcmd

import (
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, nil) }
