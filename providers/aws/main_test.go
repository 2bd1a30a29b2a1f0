package aws_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEndpoint) != "" {
		os.Exit(acquireChild())
	}
	goleak.VerifyTestMain(m)
}
