package testsshd_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/internal/testsshd"
)

// alive reports whether pid exists and is not a zombie.
func alive(t *testing.T, pid string) bool {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || !bytes.HasPrefix(stat[i+1:], []byte(" Z"))
}

func TestStopKillsDetachedSessionProcesses(t *testing.T) {
	var pid string
	t.Run("server", func(t *testing.T) {
		s := testsshd.Start(t)
		c := s.Dial(t)
		sess, err := c.NewSession()
		if err != nil {
			t.Fatal(err)
		}
		defer sess.Close()
		out, err := sess.Output("nohup sleep 1000 >/dev/null 2>&1 </dev/null & echo $!")
		if err != nil {
			t.Fatalf("exec: %v", err)
		}
		pid = strings.TrimSpace(string(out))
	})
	if pid == "" {
		t.Fatal("no pid reported")
	}
	if alive(t, pid) {
		t.Errorf("process %s started by a session still runs after the server stopped", pid)
	}
}
