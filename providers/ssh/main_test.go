package ssh_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testenv"
	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, testsshd.Tests) }
