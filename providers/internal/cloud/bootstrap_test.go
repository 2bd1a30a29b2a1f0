package cloud_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func newHostKey(t *testing.T) cloud.HostKey {
	t.Helper()
	k, err := cloud.NewHostKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newLeaseKey(t *testing.T) lease.Key {
	t.Helper()
	k, err := lease.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func bootstrap(t *testing.T) cloud.Bootstrap {
	return cloud.Bootstrap{
		AuthorizedKey: newLeaseKey(t).AuthorizedKey(), HostKey: newHostKey(t), SelfDestructAfter: 90 * time.Minute,
	}
}

// TestHostKeySecret: the private host key shows up in no formatting, log
// line or error.
func TestHostKeySecret(t *testing.T) {
	k := newHostKey(t)
	secret := string(k.PrivatePEM())
	if !strings.Contains(secret, "OPENSSH PRIVATE KEY") {
		t.Fatalf("PrivatePEM is not an OpenSSH private key")
	}
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("made", "key", k)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("made", "key", k)
	type holder struct{ Key cloud.HostKey }
	for _, s := range []string{
		fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s", k, k, k, k), fmt.Sprintf("%+v %#v", holder{k}, holder{k}), logged.String(),
	} {
		if strings.Contains(s, "PRIVATE") || strings.Contains(s, strings.Split(secret, "\n")[1]) {
			t.Errorf("formatted host key shows the private key: %s", s)
		}
		if !strings.Contains(s, "SHA256:") {
			t.Errorf("formatted host key has no fingerprint: %s", s)
		}
	}
	bad := []byte(strings.Replace(secret, "b3BlbnNzaC1rZXktdjE", "AAAA", 1))
	if _, err := cloud.ParseHostKey(bad); err == nil || strings.Contains(err.Error(), "AAAA") {
		t.Errorf("ParseHostKey of a damaged key: err = %v, want one without the key", err)
	}
	if pub := k.AuthorizedKey(); !strings.HasPrefix(pub, "ssh-ed25519 ") {
		t.Errorf("AuthorizedKey = %q", pub)
	}
	if _, err := lease.ParsePublicKey(k.AuthorizedKey()); err != nil {
		t.Errorf("AuthorizedKey does not parse: %v", err)
	}
}

func TestScriptRejects(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*cloud.Bootstrap)
		wantErr string
	}{
		{"no authorized key", func(b *cloud.Bootstrap) { b.AuthorizedKey = "" }, "authorized key"},
		{"two keys", func(b *cloud.Bootstrap) { b.AuthorizedKey += "\n" + b.AuthorizedKey }, "more than one key"},
		{"no host key", func(b *cloud.Bootstrap) { b.HostKey = cloud.HostKey{} }, "no host key"},
		{"no self-destruct", func(b *cloud.Bootstrap) { b.SelfDestructAfter = 0 }, "self-destruct after 0s"},
		{"bad user", func(b *cloud.Bootstrap) { b.User = "Root;rm" }, `user "Root;rm"`},
		{"bad port", func(b *cloud.Bootstrap) { b.Ports = []int{2222, 0} }, "port 0"},
		{"relative work root", func(b *cloud.Bootstrap) { b.WorkRoot = "work" }, `work root "work"`},
		{"root work root", func(b *cloud.Bootstrap) { b.WorkRoot = "/" }, `work root "/"`},
		{"unclean work root", func(b *cloud.Bootstrap) { b.WorkRoot = "/work/../etc" }, `work root "/work/../etc"`},
		{"quote in work root", func(b *cloud.Bootstrap) { b.WorkRoot = "/work/it's" }, "without quotes"},
		{"bad package", func(b *cloud.Bootstrap) { b.Packages = []string{"git; curl evil"} }, `package "git; curl evil"`},
		{"bad agent user", func(b *cloud.Bootstrap) { b.AgentUsers = []string{"ubuntu root"} }, `agent user "ubuntu root"`},
		{"agent user is the user", func(b *cloud.Bootstrap) { b.AgentUsers = []string{"crabbox"} }, `agent user "crabbox"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bootstrap(t)
			tt.change(&b)
			_, err := b.UserData()
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("UserData error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestScriptAgentUsers: sshd lets the agent users in after crabbox's
// user, and nobody else.
func TestScriptAgentUsers(t *testing.T) {
	b := bootstrap(t)
	b.AgentUsers = []string{"ubuntu"}
	script, err := b.UserData()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(script, "\nAllowUsers crabbox ubuntu\n"); n != 1 {
		t.Errorf("script has %d lines AllowUsers crabbox ubuntu, want 1", n)
	}
}

// TestScript checks the rendered script: valid sh, every part of the
// bootstrap present, in the order that makes the box safe.
func TestScript(t *testing.T) {
	b := bootstrap(t)
	b.WorkRoot = "/srv/crab box"
	script, err := b.UserData()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(script, "#!/bin/sh\n") {
		t.Errorf("user data does not start with #!/bin/sh (cloud-init runs only such scripts)")
	}
	if sh, err := exec.LookPath("sh"); err == nil {
		cmd := exec.Command(sh, "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sh -n: %v\n%s", err, out)
		}
	}
	inOrder := []string{
		"set -eu",
		"CRABBOX_USER='crabbox'",
		"CRABBOX_WORK_ROOT='/srv/crab box'",
		"CRABBOX_PORTS='2222 22'",
		"CRABBOX_PREPARED='0'",
		"CRABBOX_PACKAGES='git tar curl sudo'",
		"CRABBOX_SELF_DESTRUCT_SECS='5400'",
		"failed='/var/lib/crabbox/bootstrap-failed'",
		"rm -f '/var/lib/crabbox/ready' \"$failed\"",
		`tee -a "$output"`,
		// The helpers that both the last steps and a failure use.
		"install_host_key() {",
		"rm -f /etc/ssh/ssh_host_*key",
		"<<'CRABBOX_HOST_KEY'\n" + strings.TrimSpace(string(b.HostKey.PrivatePEM())) + "\nCRABBOX_HOST_KEY\n",
		"echo '" + b.HostKey.AuthorizedKey() + "'",
		"write_sshd_config() {",
		"Port 2222\nPort 22\nHostKey /etc/ssh/ssh_host_ed25519_key\nAllowUsers crabbox\nPermitRootLogin no\n",
		"PasswordAuthentication no\nKbdInteractiveAuthentication no\n",
		"AllowAgentForwarding no",
		"start_sshd() {",
		"systemctl disable --now ssh.socket",
		"systemctl restart \"$unit.service\"",
		`"$sshd" -f /etc/ssh/sshd_config`,
		// A failure still serves SSH, with a banner saying what failed.
		"bootstrap_failed() {",
		`echo "crabbox-bootstrap-failed: $step (exit status $status)"`,
		`tail -n 20 "$output"`,
		`install_host_key && write_sshd_config "Banner $failed" && "$sshd" -t -f /etc/ssh/sshd_config && start_sshd`,
		`trap 'status=$?; [ "$status" -eq 0 ] || bootstrap_failed "$status"' EXIT`,
		// The steps.
		"step='self-destruct timer'",
		"systemd-run --unit=crabbox-self-destruct",
		`--on-active="${CRABBOX_SELF_DESTRUCT_SECS}s"`,
		"poweroff || shutdown -h now",
		"step='install tools'",
		"apt-get install -y",
		"step='create user'",
		"useradd --create-home",
		"usermod -p '*'",
		"NOPASSWD:ALL",
		"<<'CRABBOX_AUTHORIZED_KEY'\n" + b.AuthorizedKey + "\nCRABBOX_AUTHORIZED_KEY\n",
		`mkdir -p "$CRABBOX_WORK_ROOT" /var/cache/crabbox`,
		"step='configure sshd'\ninstall_host_key\nwrite_sshd_config\n",
		`"$sshd" -t -f /etc/ssh/sshd_config`,
		"/usr/local/bin/crabbox-ready",
		`[ ! -f '/var/lib/crabbox/bootstrap-failed' ] || fail "box bootstrap failed`,
		"for tool in git tar; do",
		"probe='/srv/crab box'/.crabbox-ready.$$",
		"date -u +%Y-%m-%dT%H:%M:%SZ >'/var/lib/crabbox/ready'",
		"step='start sshd'\nstart_sshd\n",
	}
	rest := script
	for _, want := range inOrder {
		i := strings.Index(rest, want)
		if i < 0 {
			if strings.Contains(script, want) {
				t.Errorf("script has %q, but out of order", want)
			} else {
				t.Errorf("script lacks %q", want)
			}
			continue
		}
		rest = rest[i+len(want):]
	}
	for _, bad := range []string{"set -x", "PasswordAuthentication yes", "PermitRootLogin yes", "Include "} {
		if strings.Contains(script, bad) {
			t.Errorf("script contains %q", bad)
		}
	}
	if n := strings.Count(script, "PRIVATE KEY-----"); n != 2 {
		t.Errorf("the private host key appears %d/2 times (BEGIN and END once)", n)
	}
}

func TestScriptPrepared(t *testing.T) {
	b := bootstrap(t)
	b.Prepared, b.Ports, b.User, b.Packages = true, []int{22}, "builder", []string{"git", "rsync"}
	script, err := b.Script()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"CRABBOX_PREPARED='1'", "CRABBOX_PACKAGES='git rsync'", "Port 22\nHostKey", "AllowUsers builder"} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	if strings.Contains(script, "Port 2222") {
		t.Errorf("script listens on 2222 though Ports is [22]")
	}
}

func TestParseUserDataRoundTrip(t *testing.T) {
	b := bootstrap(t)
	b.WorkRoot, b.Ports, b.Prepared = "/tmp/Test Fake=1/001", []int{2222, 22}, true
	ud, err := b.UserData()
	if err != nil {
		t.Fatal(err)
	}
	got, err := cloud.ParseUserData(ud)
	if err != nil {
		t.Fatal(err)
	}
	want := b
	want.User, want.Packages = cloud.DefaultUser, []string{"git", "tar", "curl", "sudo"}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b cloud.HostKey) bool {
		return bytes.Equal(a.PrivatePEM(), b.PrivatePEM()) && a.AuthorizedKey() == b.AuthorizedKey()
	}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ParseUserData (-want +got):\n%s", diff)
	}
}

func TestParseUserDataRejects(t *testing.T) {
	b := bootstrap(t)
	ud, err := b.UserData()
	if err != nil {
		t.Fatal(err)
	}
	secretLine := strings.Split(string(b.HostKey.PrivatePEM()), "\n")[1]
	tests := []struct{ name, userData, wantErr string }{
		{"empty", "", "CRABBOX_SELF_DESTRUCT_SECS"},
		{"unquoted", strings.Replace(ud, "CRABBOX_USER='crabbox'", "CRABBOX_USER=crabbox", 1), "CRABBOX_USER is not a single-quoted value"},
		{"bad port", strings.Replace(ud, "CRABBOX_PORTS='2222 22'", "CRABBOX_PORTS='ssh'", 1), `port "ssh"`},
		{"no key", strings.Replace(ud, "CRABBOX_AUTHORIZED_KEY'", "NOPE'", 1), "no authorized key"},
		{"damaged host key", strings.Replace(ud, secretLine, "AAAA"+secretLine[4:], 1), "parse host key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cloud.ParseUserData(tt.userData)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseUserData error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), secretLine[4:]) {
				t.Errorf("error shows the host key: %v", err)
			}
		})
	}
}

func FuzzParseUserData(f *testing.F) {
	f.Add("CRABBOX_USER='crabbox'\nCRABBOX_SELF_DESTRUCT_SECS='60'\n")
	f.Add("#!/bin/sh\nCRABBOX_PORTS='22'\ncat <<'CRABBOX_AUTHORIZED_KEY'\nssh-ed25519 AAAA\nCRABBOX_AUTHORIZED_KEY\n")
	f.Fuzz(func(t *testing.T, ud string) {
		b, err := cloud.ParseUserData(ud)
		if err != nil {
			return
		}
		if _, err := b.Script(); err != nil {
			t.Errorf("parsed user data does not render again: %v", err)
		}
	})
}
