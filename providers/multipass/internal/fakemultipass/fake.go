// Package fakemultipass is a fake of Canonical's multipass command-line
// client for tests: a provider.CommandRunner that takes the commands the
// real client takes and answers as it does, whose instances are real SSH
// boxes (a cloudtest.Fleet booted from their cloud-init user data).
//
// It follows the client's published source, canonical/multipass at
// commit 9b0af2ec31ffcf13f19b73c88bed0f66b6a11c7b, and the command-line
// reference at
// https://documentation.ubuntu.com/multipass/latest/reference/command-line-interface/:
//
//   - src/client/cli/formatter/json_formatter.cpp: the JSON of
//     `list --format json` ({"list": [{"name", "state", "ipv4", "release",
//     "zone"}]}), `info --format json` ({"errors": [], "info": {NAME:
//     {"state", "ipv4", "image_hash", "image_release", "release",
//     "cpu_count", "load", "disks", "memory", "mounts", "zone",
//     "snapshot_count"}}}) and `version --format json` ({"multipass",
//     "multipassd"});
//   - src/client/cli/formatter/format_utils.cpp: the states Running,
//     Stopped, Deleted, Starting, ...;
//   - src/client/cli/cmd/launch.cpp: launch's options (--name, --cpus,
//     --memory, --disk, --cloud-init with "-" for stdin, --timeout), the
//     cloud-init input parsed as YAML, "Timed out waiting for instance
//     launch." and exit code 5 (include/multipass/constants.h,
//     timeout_exit_code) when --timeout passes;
//   - src/client/common/client_common.cpp (standard_failure_handler_for):
//     a failed command prints "<command> failed: <message>" to stderr and
//     exits 2 (3 when the daemon is unavailable;
//     include/multipass/cli/return_codes.h);
//   - src/daemon/daemon.cpp: `instance "NAME" does not exist`, `instance
//     "NAME" already exists`; delete without --purge leaves the instance
//     Deleted;
//   - include/multipass/constants.h: the least memory (512M) and disk
//     (1G); src/client/cli/cmd/launch.cpp: the valid instance names.
//
// Like the daemon, launch returns once cloud-init has finished: the fake
// boots the box from the script the cloud-config's runcmd runs (written by
// its write_files) before it answers.
package fakemultipass

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v2"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// Instance is one instance of the fake.
type Instance struct {
	Name, State, Image, IPv4 string
	CPUs                     int
	Memory, Disk             string
	// UserData is the cloud-config as the daemon got it.
	UserData string
}

// Fault makes one command ("launch", "info", "list", "delete",
// "version") fail or hang.
type Fault struct {
	// Code is the exit code of the failure; 2 when zero.
	Code int
	// Message is what the command prints; "<command> failed: fake
	// failure" when empty.
	Message string
	// Hang blocks the command until its context ends (the runner kills
	// it).
	Hang bool
	// OnHang is called when a hang starts.
	OnHang func()
	// After runs the command first, then fails or hangs: the answer is
	// lost.
	After bool
	// Halfway, for launch, makes the instance but leaves it Stopped with
	// no address, then fails as a launch that timed out waiting for
	// initialization does.
	Halfway bool
	// Times is how often the fault fires; 0 means every time.
	Times int
	fired int
}

// ExitError is a command's exit with a code other than 0, as
// exec.ExitError reports it.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return "exit status " + strconv.Itoa(e.Code) }

// ExitCode returns the exit code.
func (e *ExitError) ExitCode() int { return e.Code }

// Version is the version the fake reports.
const Version = "1.16.1"

// CLI is the fake multipass program at Path. It is safe for concurrent
// use.
type CLI struct {
	// Path is the program's path; the runner runs nothing else.
	Path  string
	Fleet *cloudtest.Fleet

	mu        sync.Mutex
	instances map[string]*Instance
	faults    map[string]*Fault
	events    []string
	noBoot    bool
	noDaemon  bool
}

// New returns a fake multipass program at path with no instances.
func New(path string, fleet *cloudtest.Fleet) *CLI {
	return &CLI{Path: path, Fleet: fleet, instances: map[string]*Instance{}, faults: map[string]*Fault{}}
}

var _ provider.CommandRunner = (*CLI)(nil)

// SetFault arms f for command.
func (c *CLI) SetFault(command string, f Fault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults[command] = &f
}

// SetNoBoot makes new instances run without serving SSH.
func (c *CLI) SetNoBoot() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noBoot = true
}

// SetNoDaemon makes the daemon unavailable.
func (c *CLI) SetNoDaemon() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noDaemon = true
}

// Add adds an instance made elsewhere (a user's own), running with an
// address but no box.
func (c *CLI) Add(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.instances[name] = &Instance{Name: name, State: "Running", Image: "24.04", IPv4: c.Fleet.NewAddress(), CPUs: 1, Memory: "1G", Disk: "5G"}
}

// PowerOff stops instance name's box as its own poweroff does: the
// instance is Stopped, without an address.
func (c *CLI) PowerOff(name string) {
	c.mu.Lock()
	in := c.instances[name]
	var ip string
	if in != nil {
		in.State, ip = "Stopped", in.IPv4
	}
	c.mu.Unlock()
	if ip != "" {
		_ = c.Fleet.Halt(ip)
	}
}

// Instances returns the instances, by name.
func (c *CLI) Instances() []Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Instance
	for _, name := range slices.Sorted(maps.Keys(c.instances)) {
		out = append(out, *c.instances[name])
	}
	return out
}

// Events returns the commands that changed something, in order ("launch
// NAME", "delete NAME").
func (c *CLI) Events() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.events)
}

// take returns the armed fault of command, if it fires.
func (c *CLI) take(command string) (*Fault, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.faults[command]
	if f == nil || (f.Times > 0 && f.fired >= f.Times) {
		return nil, false
	}
	f.fired++
	return f, true
}

// result is a command's outcome: its output and exit code.
type result struct {
	stdout, stderr string
	code           int
}

func fail(code int, format string, args ...any) result {
	return result{stderr: fmt.Sprintf(format, args...) + "\n", code: code}
}

// Run runs cmd as the multipass program would.
func (c *CLI) Run(ctx context.Context, cmd provider.Command) error {
	if cmd.Path != c.Path {
		return fmt.Errorf("exec: %q: executable file not found in $PATH", cmd.Path)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var stdin []byte
	if cmd.Stdin != nil {
		var err error
		if stdin, err = io.ReadAll(cmd.Stdin); err != nil {
			return err
		}
	}
	command := ""
	if len(cmd.Args) > 0 {
		command = cmd.Args[0]
	}
	f, faulty := c.take(command)
	var r result
	if !faulty || f.After || f.Halfway {
		r = c.run(cmd.Args, stdin, faulty && f.Halfway)
	}
	if faulty {
		if f.Hang {
			if f.OnHang != nil {
				f.OnHang()
			}
			<-ctx.Done()
			return fmt.Errorf("signal: killed (%w)", ctx.Err())
		}
		code, msg := f.Code, f.Message
		if code == 0 {
			code = 2
		}
		if msg == "" {
			msg = command + " failed: fake failure"
		}
		if f.Halfway {
			code, msg = 2, "launch failed: timed out waiting for initialization to complete"
		}
		r = fail(code, "%s", msg)
	}
	write(cmd.Stdout, r.stdout)
	write(cmd.Stderr, r.stderr)
	if r.code != 0 {
		return &ExitError{Code: r.code}
	}
	return nil
}

func write(w io.Writer, s string) {
	if w != nil && s != "" {
		_, _ = io.WriteString(w, s)
	}
}

// parsed are a command's options and positional arguments.
type parsed struct {
	opts map[string]string
	args []string
}

// parse reads args by the command's options: those in valued take a
// value, those in flags none; their short forms map to long ones.
func parse(args []string, valued, flags map[string]bool, short map[string]string) (parsed, error) {
	p := parsed{opts: map[string]string{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			p.args = append(p.args, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if long, ok := short[name]; ok && !strings.HasPrefix(a, "--") {
			name = long
		}
		switch {
		case flags[name] && !hasValue:
			p.opts[name] = "true"
		case valued[name]:
			if !hasValue {
				if i+1 >= len(args) {
					return p, fmt.Errorf("Missing value after '%s'.", a)
				}
				i++
				value = args[i]
			}
			p.opts[name] = value
		default:
			return p, fmt.Errorf("Unknown option '%s'.", strings.TrimLeft(a, "-"))
		}
	}
	return p, nil
}

func (c *CLI) run(args []string, stdin []byte, halfway bool) result {
	if len(args) == 0 {
		return fail(1, "Usage: multipass [options] <command>")
	}
	c.mu.Lock()
	noDaemon := c.noDaemon
	c.mu.Unlock()
	command, rest := args[0], args[1:]
	if noDaemon && command != "version" {
		return fail(3, "%s failed: cannot connect to the multipass socket", command)
	}
	switch command {
	case "version":
		return c.version(rest, noDaemon)
	case "launch":
		return c.launch(rest, stdin, halfway)
	case "info":
		return c.info(rest)
	case "list", "ls":
		return c.list(rest)
	case "delete":
		return c.delete(rest)
	}
	return fail(1, "Unknown command: '%s'", command)
}

func jsonResult(v any) result {
	out, err := json.MarshalIndent(v, "", "    ")
	if err != nil {
		return fail(2, "format failed: %v", err)
	}
	return result{stdout: string(out) + "\n"}
}

func checkFormat(p parsed) (result, bool) {
	if f, ok := p.opts["format"]; ok && f != "json" {
		return fail(1, "Invalid format type given."), false // the fake speaks JSON only
	}
	if p.opts["format"] != "json" {
		return fail(1, "the fake prints only --format json"), false
	}
	return result{}, true
}

func (c *CLI) version(args []string, noDaemon bool) result {
	p, err := parse(args, map[string]bool{"format": true}, nil, nil)
	if err != nil {
		return fail(1, "%v", err)
	}
	if r, ok := checkFormat(p); !ok {
		return r
	}
	v := map[string]string{"multipass": Version}
	if !noDaemon {
		v["multipassd"] = Version
	}
	return jsonResult(v)
}

// validName is what launch.cpp asks of instance names.
var validName = regexp.MustCompile(`^[A-Za-z](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// sizeBytes parses a size as multipass does: bytes, or a decimal with K,
// M or G (KB, KiB, ...).
func sizeBytes(s string) (float64, bool) {
	m := regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([KMG](?:i?B)?)?$`).FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	if m[2] != "" {
		v *= math.Pow(1024, float64(strings.Index("KMG", m[2][:1])+1))
	}
	return v, true
}

func (c *CLI) launch(args []string, stdin []byte, halfway bool) result {
	p, err := parse(args, map[string]bool{"name": true, "cpus": true, "memory": true, "disk": true, "cloud-init": true, "timeout": true},
		nil, map[string]string{"n": "name", "c": "cpus", "m": "memory", "d": "disk"})
	if err != nil {
		return fail(1, "%v", err)
	}
	if len(p.args) > 1 {
		return fail(1, "Too many arguments supplied")
	}
	in := Instance{Name: p.opts["name"], Image: "lts", CPUs: 1, Memory: "1G", Disk: "5G", State: "Running"}
	if len(p.args) == 1 {
		in.Image = p.args[0]
	}
	if s, ok := p.opts["cpus"]; ok {
		if in.CPUs, err = strconv.Atoi(s); err != nil || in.CPUs < 1 {
			return fail(1, "error: Invalid CPU count '%s', need a positive integer value.", s)
		}
	}
	if s, ok := p.opts["memory"]; ok {
		in.Memory = s
	}
	if s, ok := p.opts["disk"]; ok {
		in.Disk = s
	}
	if s, ok := p.opts["timeout"]; ok {
		if n, err := strconv.Atoi(s); err != nil || n <= 0 {
			return fail(1, "error: --timeout value has to be a positive integer")
		}
	}
	if !validName.MatchString(in.Name) {
		return fail(2, "launch failed: Invalid instance name supplied: %s", in.Name)
	}
	if v, ok := sizeBytes(in.Memory); !ok || v < 512<<20 {
		return fail(2, "launch failed: Invalid memory size value supplied: %s.", in.Memory)
	}
	if v, ok := sizeBytes(in.Disk); !ok || v < 1<<30 {
		return fail(2, "launch failed: Invalid disk size value supplied: %s.", in.Disk)
	}
	script := ""
	if src, ok := p.opts["cloud-init"]; ok {
		if src != "-" {
			return fail(1, "Could not load cloud-init configuration: the fake reads it from stdin only")
		}
		in.UserData = string(stdin)
		if script, err = runScript(stdin); err != nil {
			return fail(1, "Could not load cloud-init configuration: %v", err)
		}
	}
	c.mu.Lock()
	if _, ok := c.instances[in.Name]; ok {
		c.mu.Unlock()
		return fail(2, `launch failed: instance "%s" already exists`, in.Name)
	}
	if halfway {
		in.State = "Stopped"
	} else {
		in.IPv4 = c.Fleet.NewAddress()
	}
	c.instances[in.Name] = &in
	c.events = append(c.events, "launch "+in.Name)
	boot := !c.noBoot && !halfway
	c.mu.Unlock()
	if boot && script != "" {
		if err := c.Fleet.Boot(in.IPv4, script); err != nil {
			return fail(2, "launch failed: %v", err)
		}
	}
	return result{stdout: fmt.Sprintf("Launched: %s\n", in.Name)}
}

// runScript is the script cloud-init runs for cloud-config data: the
// content of the write_files entry at the path that runcmd's first
// command runs with sh.
func runScript(data []byte) (string, error) {
	var cfg struct {
		WriteFiles []struct {
			Path    string `yaml:"path"`
			Content string `yaml:"content"`
		} `yaml:"write_files"`
		RunCmd []any `yaml:"runcmd"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", err
	}
	if !bytes.HasPrefix(data, []byte("#cloud-config\n")) {
		return "", fmt.Errorf("not #cloud-config")
	}
	if len(cfg.RunCmd) != 1 {
		return "", fmt.Errorf("the fake runs exactly one runcmd, got %d", len(cfg.RunCmd))
	}
	var argv []string
	switch v := cfg.RunCmd[0].(type) {
	case string:
		argv = []string{"sh", "-c", v}
	case []any:
		for _, a := range v {
			argv = append(argv, fmt.Sprint(a))
		}
	}
	cmd := strings.Join(argv, " ")
	for _, f := range cfg.WriteFiles {
		if strings.Contains(cmd, "sh "+f.Path) {
			return f.Content, nil
		}
	}
	return "", fmt.Errorf("runcmd %q runs no file of write_files", cmd)
}

// load is the load average a running instance reports.
var load = []float64{0.08, 0.03, 0.01}

func (c *CLI) info(args []string) result {
	p, err := parse(args, map[string]bool{"format": true}, map[string]bool{"no-runtime-information": true, "snapshots": true}, nil)
	if err != nil {
		return fail(1, "%v", err)
	}
	if r, ok := checkFormat(p); !ok {
		return r
	}
	if len(p.args) == 0 {
		return fail(1, "Name argument or --all is required")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	info := map[string]any{}
	for _, name := range p.args {
		in, ok := c.instances[name]
		if !ok {
			return fail(2, `info failed: instance "%s" does not exist`, name)
		}
		d := map[string]any{
			"zone": map[string]any{"name": "", "available": true}, "state": in.State, "image_hash": "8f0d1e7b3a", "image_release": "24.04 LTS",
			"release": "", "cpu_count": strconv.Itoa(in.CPUs), "snapshot_count": "0", "load": []float64{}, "disks": map[string]any{"sda1": map[string]any{}},
			"memory": map[string]any{}, "ipv4": []string{}, "mounts": map[string]any{},
		}
		if in.State == "Running" && !p.has("no-runtime-information") {
			d["release"], d["load"] = "Ubuntu 24.04.3 LTS", load
			d["disks"] = map[string]any{"sda1": map[string]any{"used": "2147483648", "total": "32212254720"}}
			d["memory"] = map[string]any{"used": 268435456, "total": 8323244032}
			d["ipv4"] = []string{in.IPv4}
		}
		info[name] = d
	}
	return jsonResult(map[string]any{"errors": []any{}, "info": info})
}

func (p parsed) has(opt string) bool { _, ok := p.opts[opt]; return ok }

func (c *CLI) list(args []string) result {
	p, err := parse(args, map[string]bool{"format": true}, map[string]bool{"snapshots": true}, nil)
	if err != nil {
		return fail(1, "%v", err)
	}
	if r, ok := checkFormat(p); !ok {
		return r
	}
	if len(p.args) > 0 {
		return fail(1, "This command takes no arguments")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	list := []any{}
	for _, name := range slices.Sorted(maps.Keys(c.instances)) {
		in := c.instances[name]
		ipv4, release := []string{}, "Not Available"
		if in.State == "Running" {
			ipv4, release = []string{in.IPv4}, "Ubuntu 24.04 LTS"
		}
		list = append(list, map[string]any{"name": in.Name, "state": in.State, "ipv4": ipv4, "release": release,
			"zone": map[string]any{"name": "", "available": true}})
	}
	return jsonResult(map[string]any{"list": list})
}

func (c *CLI) delete(args []string) result {
	p, err := parse(args, nil, map[string]bool{"purge": true, "all": true}, map[string]string{"p": "purge"})
	if err != nil {
		return fail(1, "%v", err)
	}
	if len(p.args) == 0 {
		return fail(1, "Name argument or --all is required")
	}
	c.mu.Lock()
	for _, name := range p.args {
		if _, ok := c.instances[name]; !ok {
			c.mu.Unlock()
			return fail(2, `delete failed: instance "%s" does not exist`, name)
		}
	}
	var halt []string
	for _, name := range p.args {
		in := c.instances[name]
		if in.State == "Running" {
			halt = append(halt, in.IPv4)
		}
		if p.has("purge") {
			delete(c.instances, name)
		} else {
			in.State = "Deleted"
		}
		c.events = append(c.events, "delete "+name)
	}
	c.mu.Unlock()
	for _, ip := range halt {
		_ = c.Fleet.Halt(ip)
	}
	return result{}
}
