package cloud

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/template"
	"time"

	"golang.org/x/crypto/ssh"
)

// Defaults of a cloud box.
const (
	DefaultUser     = "crabbox"
	DefaultPort     = 2222
	FallbackPort    = 22
	DefaultWorkRoot = "/work/crabbox"
	// ReadyMarker is the file the bootstrap writes when it has finished.
	ReadyMarker = "/var/lib/crabbox/ready"
	// ReadyCommand is the check the bootstrap installs on the box's PATH
	// (/usr/local/bin): it exits 0 when the tools are present, the ready
	// marker exists and the work root is writable by the caller.
	ReadyCommand = "crabbox-ready"
	// SelfDestructRecord is the file in which the bootstrap records how it
	// armed the self-destruct timer ("systemd-run ..." or "sleep ...").
	SelfDestructRecord = "/var/lib/crabbox/self-destruct"
	// HostKeyPath is where the bootstrap installs the client's host key.
	HostKeyPath = "/etc/ssh/ssh_host_ed25519_key"
	// FailedMarker is the file in which a failed bootstrap says which step
	// failed and how its output ended; sshd serves it as its banner (see
	// BootstrapError).
	FailedMarker = "/var/lib/crabbox/bootstrap-failed"
)

// defaultPackages are installed by the bootstrap when their commands are
// missing and the image is not prepared.
var defaultPackages = []string{"git", "tar", "curl", "sudo"}

// DefaultPorts are the ports sshd listens on, in the order clients try them.
func DefaultPorts() []int { return []int{DefaultPort, FallbackPort} }

// HostKey is an ed25519 SSH host key made by the client for a box, so the
// client knows the box's key before the first connection. The private half
// is a secret: String, GoString and LogValue show only the fingerprint, and
// the zero value is "no key".
type HostKey struct {
	private []byte
	public  ssh.PublicKey
}

// NewHostKey makes a fresh ed25519 host key pair.
func NewHostKey() (HostKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return HostKey{}, fmt.Errorf("generate host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return HostKey{}, fmt.Errorf("encode host key: %w", err)
	}
	return ParseHostKey(pem.EncodeToMemory(block))
}

// ParseHostKey reads an ed25519 host key from its private OpenSSH PEM form.
// Errors never contain the key.
func ParseHostKey(privatePEM []byte) (HostKey, error) {
	signer, err := ssh.ParsePrivateKey(privatePEM)
	if err != nil {
		return HostKey{}, errors.New("parse host key: not an unencrypted OpenSSH private key")
	}
	if signer.PublicKey().Type() != ssh.KeyAlgoED25519 {
		return HostKey{}, fmt.Errorf("parse host key: %s key, want %s", signer.PublicKey().Type(), ssh.KeyAlgoED25519)
	}
	return HostKey{private: bytes.Clone(privatePEM), public: signer.PublicKey()}, nil
}

// IsZero reports whether k is the zero HostKey.
func (k HostKey) IsZero() bool { return k.public == nil }

// PrivatePEM returns the private key in OpenSSH PEM form. It is a secret:
// it goes into user data and nowhere else.
func (k HostKey) PrivatePEM() []byte { return bytes.Clone(k.private) }

// PublicKey returns the public key.
func (k HostKey) PublicKey() ssh.PublicKey { return k.public }

// AuthorizedKey returns the public key in authorized_keys form, as
// provider.LeaseTarget.HostKey wants it.
func (k HostKey) AuthorizedKey() string {
	if k.public == nil {
		return ""
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k.public)))
}

// String shows the key's type and fingerprint, never the private key.
func (k HostKey) String() string {
	if k.public == nil {
		return "HostKey(none)"
	}
	return "HostKey(" + k.public.Type() + " " + ssh.FingerprintSHA256(k.public) + ")"
}

// GoString is String, so %#v does not print the private key either.
func (k HostKey) GoString() string { return k.String() }

// LogValue is String, so loggers do not print the private key.
func (k HostKey) LogValue() slog.Value { return slog.StringValue(k.String()) }

// Bootstrap describes how the user data prepares a fresh Linux image as a
// crabbox box. The zero values of the optional fields are crabbox's
// defaults.
type Bootstrap struct {
	// AuthorizedKey is the lease's public key in authorized_keys form: the
	// only key the box accepts. Required.
	AuthorizedKey string
	// HostKey is the box's SSH host key, made by the client. Required.
	HostKey HostKey
	// SelfDestructAfter is how long after the bootstrap starts the box
	// powers itself off (the lease's TTL); the cloud's shutdown behaviour
	// then stops or terminates it. Required.
	SelfDestructAfter time.Duration
	// User is the SSH user; DefaultUser when empty.
	User string
	// Ports are the ports sshd listens on; DefaultPorts when empty.
	Ports []int
	// WorkRoot is the directory under which leases' work directories go;
	// DefaultWorkRoot when empty.
	WorkRoot string
	// Prepared says the image already has the tools: the bootstrap
	// installs no packages.
	Prepared bool
	// Packages are installed (with the image's package manager) when one
	// of their commands is missing; git, tar, curl and sudo when empty.
	Packages []string
	// AgentUsers are users of the image's own management agent that sshd
	// lets in as well, each with the keys the image gave it (multipass
	// manages its instances as ubuntu over SSH, with a key of its daemon,
	// and fails them when it cannot). None when empty.
	AgentUsers []string
}

// The patterns are compiled on first use, not at every start of the CLI,
// which links this package.
var (
	userPattern    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`) })
	packagePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._-]*$`) })
)

// CheckWorkRoot reports whether dir can be a box's work root as the
// bootstrap makes it: a clean absolute directory other than /, without
// quotes, backslashes or line breaks. Providers check their work-root
// option with it when they are configured.
func CheckWorkRoot(dir string) error {
	if !path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/" || strings.ContainsAny(dir, "'\n\r\x00\\") {
		return fmt.Errorf("work root %q: want a clean absolute directory other than / without quotes or backslashes", dir)
	}
	return nil
}

// withDefaults returns b with defaults filled in, or an error naming the
// first invalid field.
func (b Bootstrap) withDefaults() (Bootstrap, error) {
	if b.User == "" {
		b.User = DefaultUser
	}
	if len(b.Ports) == 0 {
		b.Ports = DefaultPorts()
	}
	if b.WorkRoot == "" {
		b.WorkRoot = DefaultWorkRoot
	}
	if len(b.Packages) == 0 {
		b.Packages = defaultPackages
	}
	b.Ports, b.Packages, b.AgentUsers = slices.Clone(b.Ports), slices.Clone(b.Packages), slices.Clone(b.AgentUsers)
	pub, _, _, rest, err := ssh.ParseAuthorizedKey([]byte(b.AuthorizedKey))
	switch {
	case err != nil:
		return b, fmt.Errorf("bootstrap: authorized key: %w", err)
	case strings.TrimSpace(string(rest)) != "":
		return b, errors.New("bootstrap: authorized key: more than one key given; a box accepts only the lease key")
	}
	b.AuthorizedKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	if b.HostKey.IsZero() {
		return b, errors.New("bootstrap: no host key")
	}
	if b.SelfDestructAfter < time.Minute {
		return b, fmt.Errorf("bootstrap: self-destruct after %s: must be at least a minute (the lease TTL)", b.SelfDestructAfter)
	}
	if !userPattern().MatchString(b.User) {
		return b, fmt.Errorf("bootstrap: user %q: want a lowercase Linux user name", b.User)
	}
	for _, u := range b.AgentUsers {
		if !userPattern().MatchString(u) || u == b.User {
			return b, fmt.Errorf("bootstrap: agent user %q: want a lowercase Linux user name other than %s", u, b.User)
		}
	}
	for _, p := range b.Ports {
		if p <= 0 || p > 65535 {
			return b, fmt.Errorf("bootstrap: port %d is not a TCP port", p)
		}
	}
	if err := CheckWorkRoot(b.WorkRoot); err != nil {
		return b, fmt.Errorf("bootstrap: %w", err)
	}
	for _, p := range b.Packages {
		if !packagePattern().MatchString(p) {
			return b, fmt.Errorf("bootstrap: package %q is not a package name", p)
		}
	}
	return b, nil
}

// Script renders the bootstrap as a POSIX shell script run as root. It is
// the body of the user data, and can be run on its own (the tests run it
// in a container). In order it:
//
//  1. arms the self-destruct timer (systemd-run --on-active when systemd
//     runs, otherwise a detached sleep), so not even a failed bootstrap
//     outlives the TTL;
//  2. installs the missing tools unless the image is prepared;
//  3. creates the user with passwordless sudo and only the lease key;
//  4. creates the work root and /var/cache/crabbox owned by the user;
//  5. installs the client's host key (and removes all others), and an
//     sshd configuration with password login off on the ports;
//  6. installs crabbox-ready and writes the ready marker;
//  7. restarts sshd last, so a box answering with the client's host key
//     has finished its bootstrap.
func (b Bootstrap) Script() (string, error) {
	b, err := b.withDefaults()
	if err != nil {
		return "", err
	}
	ports := make([]string, len(b.Ports))
	for i, p := range b.Ports {
		ports[i] = strconv.Itoa(p)
	}
	var out strings.Builder
	err = scriptTemplate().Execute(&out, map[string]any{
		"User":          b.User,
		"AgentUsers":    b.AgentUsers,
		"WorkRoot":      b.WorkRoot,
		"Ports":         strings.Join(ports, " "),
		"PortList":      b.Ports,
		"Prepared":      b.Prepared,
		"Packages":      strings.Join(b.Packages, " "),
		"SelfDestruct":  int64(b.SelfDestructAfter / time.Second),
		"AuthorizedKey": b.AuthorizedKey,
		"HostKeyPEM":    strings.TrimSpace(string(b.HostKey.private)),
		"HostKeyPub":    b.HostKey.AuthorizedKey(),
		"HostKeyPath":   HostKeyPath,
		"ReadyMarker":   ReadyMarker,
		"ReadyCommand":  ReadyCommand,
		"Record":        SelfDestructRecord,
		"FailedMarker":  FailedMarker,
		"FailedPrefix":  failedPrefix,
	})
	if err != nil {
		return "", fmt.Errorf("bootstrap: render: %w", err)
	}
	return out.String(), nil
}

// UserData renders the bootstrap as cloud-init user data: the script of
// Script, which cloud-init runs once, as root, on the first boot (its
// "#!" user-data format). Clouds that want it base64-encoded (AWS, Azure)
// encode it themselves.
func (b Bootstrap) UserData() (string, error) { return b.Script() }

// ParseUserData reads back the settings of user data rendered by UserData
// (or Script): the authorized key, the host key, the user, ports, work
// root, self-destruct delay, and whether the image is prepared. Fake clouds
// in tests use it to serve the box the user data describes. Errors never
// contain the host key.
func ParseUserData(userData string) (Bootstrap, error) {
	var b Bootstrap
	vars := map[string]string{}
	for _, line := range strings.Split(userData, "\n") {
		name, value, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(name, "CRABBOX_") || strings.ContainsAny(name, " \t") {
			continue
		}
		if len(value) < 2 || value[0] != '\'' || value[len(value)-1] != '\'' {
			return b, fmt.Errorf("user data: %s is not a single-quoted value", name)
		}
		vars[name] = value[1 : len(value)-1]
	}
	b.User, b.WorkRoot = vars["CRABBOX_USER"], vars["CRABBOX_WORK_ROOT"]
	b.Prepared = vars["CRABBOX_PREPARED"] == "1"
	if pk := vars["CRABBOX_PACKAGES"]; pk != "" {
		b.Packages = strings.Fields(pk)
	}
	for _, f := range strings.Fields(vars["CRABBOX_PORTS"]) {
		p, err := strconv.Atoi(f)
		if err != nil {
			return b, fmt.Errorf("user data: port %q is not a number", f)
		}
		b.Ports = append(b.Ports, p)
	}
	secs, err := strconv.ParseInt(vars["CRABBOX_SELF_DESTRUCT_SECS"], 10, 64)
	if err != nil {
		return b, errors.New("user data: no valid CRABBOX_SELF_DESTRUCT_SECS")
	}
	b.SelfDestructAfter = time.Duration(secs) * time.Second
	key, ok := heredoc(userData, authorizedKeyEOF)
	if !ok {
		return b, errors.New("user data: no authorized key")
	}
	b.AuthorizedKey = strings.TrimSpace(key)
	pemText, ok := heredoc(userData, hostKeyEOF)
	if !ok {
		return b, errors.New("user data: no host key")
	}
	if b.HostKey, err = ParseHostKey([]byte(pemText)); err != nil {
		return b, fmt.Errorf("user data: %w", err)
	}
	if _, err := b.withDefaults(); err != nil {
		return b, fmt.Errorf("user data: %w", err)
	}
	return b, nil
}

// heredoc returns the body of the first here-document ended by eof.
func heredoc(s, eof string) (string, bool) {
	_, rest, ok := strings.Cut(s, "<<'"+eof+"'\n")
	if !ok {
		return "", false
	}
	body, _, ok := strings.Cut(rest, "\n"+eof+"\n")
	return body + "\n", ok
}

const (
	authorizedKeyEOF = "CRABBOX_AUTHORIZED_KEY"
	hostKeyEOF       = "CRABBOX_HOST_KEY"
)

// scriptTemplate is parsed on first use, not at start: every command of
// the crabbox CLI links this package (for the clouds' Specs), and few of
// them render a bootstrap.
var scriptTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("bootstrap").Parse(scriptSource))
})

const scriptSource = `#!/bin/sh
# crabbox box bootstrap: rendered by the crabbox client, run once as root
# (by cloud-init on the first boot). It turns a fresh Linux image into a box.
set -eu
umask 022
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH

CRABBOX_USER='{{.User}}'
CRABBOX_WORK_ROOT='{{.WorkRoot}}'
CRABBOX_PORTS='{{.Ports}}'
CRABBOX_PREPARED='{{if .Prepared}}1{{else}}0{{end}}'
CRABBOX_PACKAGES='{{.Packages}}'
CRABBOX_SELF_DESTRUCT_SECS='{{.SelfDestruct}}'

log() { echo "crabbox-bootstrap: $*" >&2; }
state=/var/lib/crabbox
failed='{{.FailedMarker}}'
output=$state/bootstrap.log
sshd=$(command -v sshd || echo /usr/sbin/sshd)
step=prepare
mkdir -p "$state"
rm -f '{{.ReadyMarker}}' "$failed"

# The output of the bootstrap also goes to $output, whose end a failure
# quotes (through a fifo and tee: POSIX sh has no process substitution).
# Fds 3 and 4 keep the original output; what outlives the bootstrap closes
# them.
exec 3>&1 4>&2
teepid=
rm -f "$state/bootstrap.fifo"
if command -v tee >/dev/null 2>&1 && mkfifo -m 0600 "$state/bootstrap.fifo" 2>/dev/null; then
	: >"$output"
	tee -a "$output" <"$state/bootstrap.fifo" >&4 &
	teepid=$!
	exec >"$state/bootstrap.fifo" 2>&1
	rm -f "$state/bootstrap.fifo"
fi
# end_output_log stops copying output to $output, waiting at most ~2s for
# tee to write what it has (a daemon started by a package may hold the fifo).
end_output_log() {
	[ -n "$teepid" ] || return 0
	exec >&3 2>&4
	i=0
	while kill -0 "$teepid" 2>/dev/null && [ $i -lt 20 ]; do
		sleep 0.1 2>/dev/null || sleep 1
		i=$((i + 1))
	done
	teepid=
}

# install_host_key installs the host key made by the client, and no other.
install_host_key() {
	rm -f /etc/ssh/ssh_host_*key /etc/ssh/ssh_host_*key.pub
	mkdir -p /etc/ssh
	(
		umask 077
		cat >'{{.HostKeyPath}}' <<'CRABBOX_HOST_KEY'
{{.HostKeyPEM}}
CRABBOX_HOST_KEY
	)
	echo '{{.HostKeyPub}}' >'{{.HostKeyPath}}.pub'
}

# write_sshd_config writes sshd's settings, plus the line $1 if given.
write_sshd_config() {
	[ -f /etc/ssh/sshd_config ] && [ ! -f /etc/ssh/sshd_config.crabbox-orig ] &&
		cp /etc/ssh/sshd_config /etc/ssh/sshd_config.crabbox-orig
	cat >/etc/ssh/sshd_config <<'CRABBOX_SSHD_CONFIG'
# Written by crabbox's bootstrap; the original is sshd_config.crabbox-orig.
{{range .PortList}}Port {{.}}
{{end}}HostKey {{.HostKeyPath}}
AllowUsers {{.User}}{{range .AgentUsers}} {{.}}{{end}}
PermitRootLogin no
PubkeyAuthentication yes
AuthenticationMethods publickey
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitEmptyPasswords no
AllowAgentForwarding no
AllowTcpForwarding local
X11Forwarding no
PermitTunnel no
UsePAM yes
PrintMotd no
ClientAliveInterval 30
MaxStartups 50:30:100
Subsystem sftp internal-sftp
CRABBOX_SSHD_CONFIG
	[ -z "${1:-}" ] || echo "$1" >>/etc/ssh/sshd_config
	mkdir -p /run/sshd
	chmod 0755 /run/sshd
}

# start_sshd (re)starts sshd with the settings written, and fails if it
# cannot; $restarted says how it started.
start_sshd() {
	restarted=
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
		# A socket-activated sshd listens where ssh.socket says: use the service.
		systemctl disable --now ssh.socket >/dev/null 2>&1 || true
		systemctl daemon-reload || true
		for unit in ssh sshd; do
			if systemctl cat "$unit.service" >/dev/null 2>&1; then
				systemctl enable "$unit.service" >/dev/null 2>&1 || true
				if systemctl restart "$unit.service"; then
					restarted=$unit.service
					break
				fi
			fi
		done
	fi
	if [ -z "$restarted" ]; then
		if [ -f /run/sshd.pid ] && pid=$(cat /run/sshd.pid) && kill "$pid" 2>/dev/null; then
			i=0
			while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do
				sleep 0.1 2>/dev/null || sleep 1
				i=$((i + 1))
			done
		fi
		"$sshd" -f /etc/ssh/sshd_config 3>&- 4>&- || return 1
		restarted=$sshd
	fi
}

# bootstrap_failed runs when a step fails: the box still serves SSH with
# the client's host key, and sshd's banner (sent before authentication)
# names the failed step and quotes the end of the output, so the client's
# wait for SSH reports the failure at once instead of timing out. The
# ready marker stays absent, so crabbox-ready fails too.
bootstrap_failed() {
	status=$1
	set +e
	trap - EXIT
	end_output_log
	rm -f '{{.ReadyMarker}}'
	{
		echo "{{.FailedPrefix}}$step (exit status $status)"
		tail -n 20 "$output" 2>/dev/null | tail -c 2000 | tr -cd '\11\12\40-\176'
	} >"$failed.tmp" && mv -f "$failed.tmp" "$failed"
	log "FAILED at $step (exit status $status); sshd's banner reports it"
	if install_host_key && write_sshd_config "Banner $failed" && "$sshd" -t -f /etc/ssh/sshd_config && start_sshd; then
		log "sshd ($restarted) reports the failure on ports $CRABBOX_PORTS"
	else
		log "sshd could not start to report the failure"
	fi
	exit "$status"
}
trap 'status=$?; [ "$status" -eq 0 ] || bootstrap_failed "$status"' EXIT

# 1. Self-destruct at the lease's TTL, armed first so that not even a failed
# bootstrap outlives it. The cloud's shutdown behaviour then stops or
# terminates the machine.
step='self-destruct timer'
if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1 &&
	systemd-run --unit=crabbox-self-destruct --description='crabbox lease TTL' \
		--on-active="${CRABBOX_SELF_DESTRUCT_SECS}s" --timer-property=AccuracySec=1s \
		/bin/sh -c 'systemctl poweroff || poweroff -f' >/dev/null 2>&1; then
	echo "systemd-run --on-active=${CRABBOX_SELF_DESTRUCT_SECS}s" >'{{.Record}}'
else
	nohup /bin/sh -c 'sleep "$1"; poweroff || shutdown -h now || halt -p || halt -f' crabbox-self-destruct \
		"$CRABBOX_SELF_DESTRUCT_SECS" </dev/null >/dev/null 2>&1 3>&- 4>&- &
	echo "sleep ${CRABBOX_SELF_DESTRUCT_SECS}s (pid $!)" >'{{.Record}}'
fi
log "self-destruct armed: $(cat '{{.Record}}')"

# 2. Tools, unless the image is prepared: only what is missing.
step='install tools'
if [ "$CRABBOX_PREPARED" != 1 ]; then
	missing=
	for pkg in $CRABBOX_PACKAGES; do
		command -v "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
	done
	if [ -n "$missing" ]; then
		log "installing:$missing"
		if command -v apt-get >/dev/null 2>&1; then
			export DEBIAN_FRONTEND=noninteractive
			apt-get update -q && apt-get install -y -q --no-install-recommends $missing
		elif command -v dnf >/dev/null 2>&1; then
			dnf install -y $missing
		elif command -v yum >/dev/null 2>&1; then
			yum install -y $missing
		elif command -v zypper >/dev/null 2>&1; then
			zypper --non-interactive install $missing
		elif command -v apk >/dev/null 2>&1; then
			apk add --no-cache $missing
		else
			log "no known package manager to install:$missing"
			exit 1
		fi
	fi
fi

# 3. The user: passwordless sudo, no password login, only the lease key.
step='create user'
if ! id "$CRABBOX_USER" >/dev/null 2>&1; then
	shell=/bin/sh
	[ -x /bin/bash ] && shell=/bin/bash
	useradd --create-home --shell "$shell" "$CRABBOX_USER"
fi
usermod -p '*' "$CRABBOX_USER"
group=$(id -gn "$CRABBOX_USER")
home=$(getent passwd "$CRABBOX_USER" | cut -d: -f6)
mkdir -p /etc/sudoers.d
echo "$CRABBOX_USER ALL=(ALL) NOPASSWD:ALL" >/etc/sudoers.d/90-crabbox
chmod 0440 /etc/sudoers.d/90-crabbox
mkdir -p "$home/.ssh"
cat >"$home/.ssh/authorized_keys" <<'CRABBOX_AUTHORIZED_KEY'
{{.AuthorizedKey}}
CRABBOX_AUTHORIZED_KEY
chmod 0700 "$home/.ssh"
chmod 0600 "$home/.ssh/authorized_keys"
chown -R "$CRABBOX_USER:$group" "$home/.ssh"

# 4. The work root and the shared cache.
step='create work root'
mkdir -p "$CRABBOX_WORK_ROOT" /var/cache/crabbox
chown "$CRABBOX_USER:$group" "$CRABBOX_WORK_ROOT" /var/cache/crabbox

# 5. The host key made by the client (and no other), and sshd's settings.
step='configure sshd'
install_host_key
write_sshd_config
"$sshd" -t -f /etc/ssh/sshd_config

# 6. The ready check and the ready marker.
step='install crabbox-ready'
cat >'/usr/local/bin/{{.ReadyCommand}}' <<'CRABBOX_READY'
#!/bin/sh
# crabbox-ready: exits 0 when this box is ready for crabbox.
fail() { echo "crabbox-ready: $*" >&2; exit 1; }
[ ! -f '{{.FailedMarker}}' ] || fail "box bootstrap failed: $(head -n 1 '{{.FailedMarker}}')"
for tool in git tar; do
	command -v "$tool" >/dev/null 2>&1 || fail "$tool is not installed"
done
[ -f '{{.ReadyMarker}}' ] || fail "the bootstrap has not finished ({{.ReadyMarker}} is missing)"
probe='{{.WorkRoot}}'/.crabbox-ready.$$
(: >"$probe") 2>/dev/null || fail "work root {{.WorkRoot}} is not writable"
rm -f "$probe"
echo ready
CRABBOX_READY
chmod 0755 '/usr/local/bin/{{.ReadyCommand}}'
date -u +%Y-%m-%dT%H:%M:%SZ >'{{.ReadyMarker}}'

# 7. sshd, last: a box answering with the client's host key (and no
# failure banner) is ready.
step='start sshd'
start_sshd
log "ready: sshd ($restarted) on ports $CRABBOX_PORTS"
end_output_log
`
