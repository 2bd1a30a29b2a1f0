package cloud_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// cloudinitImage is built by .ci/setup.d/30-cloudinit-image.sh: a Debian
// minbase root filesystem with openssh-server, sudo, git and curl.
const cloudinitImage = "crabbox-test/cloudinit:latest"

// needImage skips (or, in CI, fails) when docker or the image is missing.
func needImage(t *testing.T) string {
	t.Helper()
	missing := func(why string) { containerTests.Skip(t, why) }
	docker, err := exec.LookPath("docker")
	if err != nil {
		missing("docker is not installed")
	}
	if out, err := exec.Command(docker, "image", "inspect", "--format", "{{.Id}}", cloudinitImage).CombinedOutput(); err != nil {
		missing(fmt.Sprintf("image %s is not there (%v: %s)", cloudinitImage, err, bytes.TrimSpace(out)))
	}
	return docker
}

func dockerRun(t *testing.T, docker string, args ...string) string {
	t.Helper()
	out, err := exec.Command(docker, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// bootedBox is a container that ran the bootstrap.
type bootedBox struct {
	docker, name string
	ports        map[int]int // box port -> 127.0.0.1 port
	hostKey      ssh.PublicKey
}

func (b bootedBox) logs() string {
	out, _ := exec.Command(b.docker, "exec", b.name, "cat", "/var/log/crabbox-bootstrap.log").CombinedOutput()
	return string(out)
}

func (b bootedBox) dial(user string, auth ssh.AuthMethod, port int) (*ssh.Client, error) {
	return ssh.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b.ports[port])), &ssh.ClientConfig{
		User: user, Auth: []ssh.AuthMethod{auth}, HostKeyCallback: ssh.FixedHostKey(b.hostKey), Timeout: 30 * time.Second,
	})
}

// startContainer runs the user data of bs as a plain script in a fresh
// Debian container (no cloud-init there, as the script needs none) with
// its SSH ports published on 127.0.0.1, and returns the box and its
// 127.0.0.1 ports in bs's order. then joins the script to the sleep that
// keeps the container up: "&&" stops it when the script fails, ";" keeps
// it.
func startContainer(t *testing.T, docker string, bs cloud.Bootstrap, then string) (bootedBox, []int) {
	t.Helper()
	ud, err := bs.UserData()
	if err != nil {
		t.Fatal(err)
	}
	udFile := filepath.Join(t.TempDir(), "user-data")
	if err := os.WriteFile(udFile, []byte(ud), 0o600); err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 6)
	rand.Read(suffix)
	box := bootedBox{docker: docker, name: "crabbox-cloudinit-test-" + hex.EncodeToString(suffix), ports: map[int]int{}, hostKey: bs.HostKey.PublicKey()}
	ports := bs.Ports
	if len(ports) == 0 {
		ports = cloud.DefaultPorts()
	}
	args := []string{"create", "--name", box.name, "--label", "crabbox-test=cloudinit"}
	for _, p := range ports {
		args = append(args, "-p", fmt.Sprintf("127.0.0.1::%d", p))
	}
	args = append(args, cloudinitImage, "/bin/sh", "-c", "sh /crabbox-user-data >/var/log/crabbox-bootstrap.log 2>&1 "+then+" exec sleep infinity")
	dockerRun(t, docker, args...)
	t.Cleanup(func() { _ = exec.Command(docker, "rm", "-f", box.name).Run() })
	dockerRun(t, docker, "cp", udFile, box.name+":/crabbox-user-data")
	dockerRun(t, docker, "start", box.name)
	var probe []int
	for _, p := range ports {
		hostPort := dockerRun(t, docker, "port", box.name, fmt.Sprintf("%d/tcp", p))
		_, port, err := net.SplitHostPort(strings.Fields(hostPort)[0])
		if err != nil {
			t.Fatalf("docker port %d: %q", p, hostPort)
		}
		box.ports[p], _ = strconv.Atoi(port)
		probe = append(probe, box.ports[p])
	}
	return box, probe
}

// bootContainer starts bs in a container (see startContainer) and waits
// until sshd answers with the injected host key.
func bootContainer(t *testing.T, docker string, bs cloud.Bootstrap) bootedBox {
	t.Helper()
	box, probe := startContainer(t, docker, bs, "&&")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wait := cloud.SSHWait{Host: "127.0.0.1", Ports: probe, HostKey: box.hostKey, Interval: 100 * time.Millisecond}
	if _, err := cloud.WaitForSSH(ctx, wait); err != nil {
		t.Fatalf("box never answered with the injected host key: %v\nbootstrap log:\n%s", err, box.logs())
	}
	// While sshd starts, a later port may answer first; once the box
	// serves, the first port is preferred.
	port, err := cloud.WaitForSSH(ctx, wait)
	if err != nil {
		t.Fatalf("box stopped answering: %v\nbootstrap log:\n%s", err, box.logs())
	}
	if port != probe[0] {
		t.Errorf("box answered first on %d, want %d (its first port)", port, probe[0])
	}
	return box
}

func run(c *ssh.Client, cmd string) (string, error) {
	s, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	return strings.TrimSpace(string(out)), err
}

// TestBootstrapInContainer runs the rendered user data in a Debian
// container and checks that the box is reachable on its ports with the
// lease key and, strictly, the injected host key, and is what the
// bootstrap promises: user, sudo, work root, ready check, sshd settings,
// the self-destruct timer; and that nothing else gets in.
func TestBootstrapInContainer(t *testing.T) {
	docker := needImage(t)
	lk := newLeaseKey(t)
	b := cloud.Bootstrap{AuthorizedKey: lk.AuthorizedKey(), HostKey: newHostKey(t), SelfDestructAfter: 90 * time.Minute}
	box := bootContainer(t, docker, b)
	for _, p := range []int{2222, 22} {
		t.Run(fmt.Sprintf("port %d", p), func(t *testing.T) {
			c, err := box.dial(cloud.DefaultUser, ssh.PublicKeys(lk.Signer), p)
			if err != nil {
				t.Fatalf("SSH as crabbox with the lease key, strict host key: %v\nbootstrap log:\n%s", err, box.logs())
			}
			defer c.Close()
			checks := []struct{ cmd, want string }{
				{cloud.ReadyCommand, "ready"},
				{"id -un", "crabbox"},
				{"sudo -n id -u", "0"},
				{"ls /etc/ssh/ | grep ssh_host_ | tr '\\n' ' '", "ssh_host_ed25519_key ssh_host_ed25519_key.pub"},
				{"stat -c '%U %a' " + cloud.DefaultWorkRoot + " /var/cache/crabbox | tr '\\n' ' '", "crabbox 755 crabbox 755"},
				{"stat -c '%a' ~/.ssh/authorized_keys; cat ~/.ssh/authorized_keys", "600\n" + lk.AuthorizedKey()},
				{"cut -d' ' -f1,2 " + cloud.SelfDestructRecord, "sleep 5400s"},
				{"sudo -n /usr/sbin/sshd -T | grep -E '^(passwordauthentication|permitrootlogin|kbdinteractiveauthentication|allowagentforwarding) ' | sort | tr '\\n' ' '",
					"allowagentforwarding no kbdinteractiveauthentication no passwordauthentication no permitrootlogin no"},
				{"cd " + cloud.DefaultWorkRoot + " && git init -q x && tar -cf - x | tar -tf - | head -1", "x/"},
			}
			for _, ck := range checks {
				got, err := run(c, ck.cmd)
				if err != nil || got != strings.TrimSpace(ck.want) {
					t.Errorf("%s = %q, %v; want %q", ck.cmd, got, err, ck.want)
				}
			}
		})
	}
	// The self-destruct sleeper runs detached from the bootstrap.
	if out, err := exec.Command(docker, "exec", box.name, "ps", "-eo", "args").CombinedOutput(); err != nil || !strings.Contains(string(out), "sleep 5400") {
		t.Errorf("no self-destruct sleeper among the box's processes (%v):\n%s", err, out)
	}

	other := newLeaseKey(t)
	refused := []struct {
		name string
		user string
		auth ssh.AuthMethod
	}{
		{"another key", "crabbox", ssh.PublicKeys(other.Signer)},
		{"root with the lease key", "root", ssh.PublicKeys(lk.Signer)},
		{"password", "crabbox", ssh.Password("")},
	}
	for _, r := range refused {
		if c, err := box.dial(r.user, r.auth, 2222); err == nil {
			c.Close()
			t.Errorf("%s: login accepted", r.name)
		}
	}
	wrongHost := box
	wrongHost.hostKey = newHostKey(t).PublicKey()
	if c, err := wrongHost.dial("crabbox", ssh.PublicKeys(lk.Signer), 2222); err == nil {
		c.Close()
		t.Errorf("a client pinning another host key connected")
	}
}

// TestBootstrapInContainerCustom: a prepared image, another user, one
// port and a work root with a space in it.
func TestBootstrapInContainerCustom(t *testing.T) {
	docker := needImage(t)
	lk := newLeaseKey(t)
	b := cloud.Bootstrap{
		AuthorizedKey: lk.AuthorizedKey(), HostKey: newHostKey(t), SelfDestructAfter: time.Hour,
		User: "builder", Ports: []int{2222}, WorkRoot: "/srv/crab box", Prepared: true,
	}
	box := bootContainer(t, docker, b)
	c, err := box.dial("builder", ssh.PublicKeys(lk.Signer), 2222)
	if err != nil {
		t.Fatalf("SSH as builder: %v\nbootstrap log:\n%s", err, box.logs())
	}
	defer c.Close()
	for _, ck := range []struct{ cmd, want string }{
		{cloud.ReadyCommand, "ready"},
		{"id -un", "builder"},
		{"sudo -n true && echo sudo", "sudo"},
		{"stat -c '%U' '/srv/crab box'", "builder"},
		{"sudo -n /usr/sbin/sshd -T | grep -E '^(port|allowusers) ' | sort | tr '\\n' ' '", "allowusers builder port 2222"},
		{"cut -d' ' -f1,2 " + cloud.SelfDestructRecord, "sleep 3600s"},
	} {
		got, err := run(c, ck.cmd)
		if err != nil || got != ck.want {
			t.Errorf("%s = %q, %v; want %q", ck.cmd, got, err, ck.want)
		}
	}
	if c, err := box.dial("crabbox", ssh.PublicKeys(lk.Signer), 2222); err == nil {
		c.Close()
		t.Errorf("user crabbox logged in on a box for builder")
	}
}

// TestBootstrapFailureInContainer: a bootstrap whose step fails (here a
// package that does not exist) still starts sshd with the client's host
// key, and its banner makes WaitForSSH report the failed step and the end
// of its output at once; crabbox-ready says so too.
func TestBootstrapFailureInContainer(t *testing.T) {
	docker := needImage(t)
	lk := newLeaseKey(t)
	bs := cloud.Bootstrap{
		AuthorizedKey: lk.AuthorizedKey(), HostKey: newHostKey(t), SelfDestructAfter: time.Hour,
		Packages: []string{"crabbox-no-such-package"},
	}
	box, _ := startContainer(t, docker, bs, ";")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := cloud.WaitForSSH(ctx, cloud.SSHWait{Host: "127.0.0.1", Ports: []int{box.ports[cloud.DefaultPort]}, HostKey: bs.HostKey.PublicKey(), Interval: 100 * time.Millisecond})
	logs := box.logs()
	var be *cloud.BootstrapError
	if !errors.As(err, &be) {
		t.Fatalf("WaitForSSH err = %v, want a *cloud.BootstrapError\nbootstrap log:\n%s", err, logs)
	}
	if !strings.HasPrefix(be.Step, "install tools (exit status ") || be.Output == "" {
		t.Errorf("BootstrapError = %+v, want the install step and its output", be)
	}
	if out, err := exec.Command(docker, "exec", "-u", "0", box.name, "sh", "-c", "test -f "+cloud.ReadyMarker+" || echo no ready marker").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "no ready marker" {
		t.Errorf("ready marker check: %q, %v; want no ready marker", out, err)
	}
}
