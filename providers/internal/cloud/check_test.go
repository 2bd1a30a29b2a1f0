package cloud_test

import (
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func TestCheckBootstrap(t *testing.T) {
	if err := cloud.CheckBootstrap("/work/crabbox", []int{2222, 22}, false); err != nil {
		t.Errorf("CheckBootstrap of the defaults: %v", err)
	}
	if err := cloud.CheckBootstrap("work", nil, false); err == nil || !strings.Contains(err.Error(), `work root "work"`) {
		t.Errorf("CheckBootstrap of a relative work root: %v", err)
	}
	if err := cloud.CheckBootstrap("/work", []int{70000}, false); err == nil || !strings.Contains(err.Error(), "port 70000") {
		t.Errorf("CheckBootstrap of a bad port: %v", err)
	}
}
