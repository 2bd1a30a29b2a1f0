package providerprogram

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/providers/external"
	sshp "github.com/crabbox-dev/crabbox/providers/ssh"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Run by hand with arguments, the program says what it is and exits 2,
// reading nothing.
func TestArgumentsAreRefused(t *testing.T) {
	var out, errw strings.Builder
	code := run(sshp.Provider{}, []string{"--help"}, strings.NewReader(`{"protocolVersion":1,"operation":"list"}`), &out, &errw)
	if code != 2 || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q; want 2 and nothing", code, out.String())
	}
	if !strings.Contains(errw.String(), "crabbox run --provider ssh") {
		t.Errorf("stderr %q does not say how to use the provider", errw.String())
	}
}

// A request gets one response on stdout and exit 0, even when the
// operation failed (the failure is in the response).
func TestOneRequestOneResponse(t *testing.T) {
	var out, errw strings.Builder
	code := run(sshp.Provider{}, nil, strings.NewReader(`{"protocolVersion":1,"operation":"fly"}`), &out, &errw)
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errw.String())
	}
	resp, err := external.ParseResponse([]byte(out.String()))
	if err == nil || !strings.Contains(resp.Error, `operation "fly"`) {
		t.Fatalf("response %q, want the unknown operation named", out.String())
	}
}

// A log level that is not one is refused.
func TestBadLogLevel(t *testing.T) {
	t.Setenv(LogEnv, "chatty")
	var out, errw strings.Builder
	if code := run(sshp.Provider{}, nil, strings.NewReader(""), &out, &errw); code != 2 || !strings.Contains(errw.String(), LogEnv) {
		t.Fatalf("exit %d, stderr %q; want 2 naming %s", code, errw.String(), LogEnv)
	}
}
