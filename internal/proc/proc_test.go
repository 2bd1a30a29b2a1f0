package proc

import (
	"os/exec"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSelfIsNotGone(t *testing.T) {
	pid, start := Self()
	if Gone(pid, start) {
		t.Errorf("Gone(Self()) = true")
	}
	if Gone(pid, "") {
		t.Errorf("Gone(own pid, no start) = true")
	}
}

func TestEndedProcessIsGone(t *testing.T) {
	cmd := exec.Command("go", "version")
	if err := cmd.Run(); err != nil {
		t.Skipf("cannot start a process to watch end: %v", err)
	}
	if !Gone(cmd.Process.Pid, "") {
		t.Errorf("Gone(pid of a reaped process) = false")
	}
}

func TestReusedPIDIsGone(t *testing.T) {
	pid, start := Self()
	if start == "" {
		t.Skip("this system tells no process start times")
	}
	if !Gone(pid, start+"0") {
		t.Errorf("Gone(own pid, another start) = false: a reused PID would pass for the recorded process")
	}
}

func TestUnknownPIDIsNotJudged(t *testing.T) {
	if Gone(0, "") || Gone(-1, "x") {
		t.Errorf("Gone of a PID that was never recorded = true")
	}
}
