//go:build unix

// Command syncbench measures crabbox's sync against rsync and tar over ssh,
// side by side on one machine, as DESIGN.md's "Performance targets" ask.
//
//	go run ./bench/syncbench [-files 20000] [-runs 5] [-seed 1] [-curve 20000,100000,200000] [-compare BIN] [-first-only | -loop-only]
//
// It starts its own OpenSSH sshd on a free 127.0.0.1 port with generated
// keys, builds a synthetic git checkout of -files files, builds crabbox and
// times whole processes (median and min–max of -runs, the tools taking
// turns to go first) for a first full sync (beside rsync, tar|ssh|tar and
// the floor of any sync through sshd into the box's tar: an archive made
// beforehand, untimed, sent with ssh -c aes128-gcm@openssh.com, the
// cipher crabbox uses, into tar -x -b 128, the records crabbox has the
// box's GNU tar read), a no-op resync, an incremental
// resync (10 tracked files edited in place, 1 added, 1 deleted) and a
// no-op run. Then, for each size of -curve, it makes a checkout of that
// many files and times a no-op run and an incremental resync again, with
// crabbox's peak memory (the child's maximum resident set size) in the
// no-op runs: the cost of a sync should grow with what changed, not with
// the tree. The machine's load average is printed before and after.
//
// To weigh a change to the first sync, -compare BIN times the first full
// sync of another crabbox binary too (a build of the commit before, say),
// taking turns with the others, and reports this build against it, and
// the same for the no-op resync, the incremental resync and the no-op run
// (into a warm lease of its own); -first-only stops after the first full
// sync. -loop-only times only the warm loop of issue 37 (no-op resync,
// incremental resync and no-op run, after one untimed first sync; no
// curve), which is quick enough to repeat. Every ratio is shown with the
// range of the ratios of the runs taken side by side. Everything it
// creates lives in one directory under os.TempDir (set TMPDIR=/dev/shm to put
// it on tmpfs), removed with sshd killed on exit and on Ctrl-C. It installs
// nothing: sshd, ssh, rsync, tar and git must be present. Only 127.0.0.1 is
// contacted.
//
// Every tool logs in as the same account. Run as root, that is by default
// the account crabbox-bench (created with useradd if missing, a login
// shell with the system's default start-up files, as on a fresh box), so
// that the caller's own shell start-up files are not what is measured: a
// .bashrc that starts a version manager costs each SSH session ~100 ms,
// which would hide the tools' own costs. -login picks another account.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/crabbox-dev/crabbox/internal/sshd"
	"github.com/crabbox-dev/crabbox/sync/watch"
)

func main() {
	var cfg config
	flag.IntVar(&cfg.files, "files", 20000, "number of files in the synthetic checkout")
	flag.IntVar(&cfg.runs, "runs", 5, "timed runs per scenario and tool (the median is reported)")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the synthetic checkout's layout and contents")
	flag.BoolVar(&cfg.verbose, "v", false, "print every timed command and its duration")
	flag.StringVar(&cfg.login, "login", "", "account every tool logs in as (default: crabbox-bench when run as root, else the current user)")
	curve := flag.String("curve", "20000,100000,200000", "comma-separated checkout sizes of the tree-size curve (\"\" for none)")
	flag.StringVar(&cfg.compare, "compare", "", "another crabbox binary whose first full sync is timed too, for an A/B comparison")
	flag.BoolVar(&cfg.firstOnly, "first-only", false, "time the first full sync only (no resyncs, no curve)")
	flag.BoolVar(&cfg.loopOnly, "loop-only", false, "time the warm loop only: no-op resync, incremental resync and no-op run, after one untimed first sync (no curve)")
	flag.Parse()
	var err error
	if cfg.curve, err = parseSizes(*curve); err != nil || cfg.files < 20 || cfg.runs < 1 || flag.NArg() != 0 || cfg.firstOnly && cfg.loopOnly {
		if err != nil {
			fmt.Fprintln(os.Stderr, "syncbench: -curve:", err)
		}
		fmt.Fprintln(os.Stderr, "usage: syncbench [-files N>=20] [-runs N>=1] [-seed N] [-curve N,N,...] [-compare BIN] [-first-only | -loop-only] [-v]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg)
	interrupted := ctx.Err() != nil
	stop()
	if err != nil {
		if interrupted {
			fmt.Fprintln(os.Stderr, "syncbench: interrupted; sshd stopped and temporary files removed")
			os.Exit(130)
		}
		fmt.Fprintln(os.Stderr, "syncbench:", err)
		os.Exit(1)
	}
}

type config struct {
	files, runs int
	curve       []int // sizes of the tree-size curve
	seed        uint64
	verbose     bool
	login       string
	compare     string // another crabbox binary to time the first sync of
	firstOnly   bool
	loopOnly    bool // time the warm loop only
}

// benchAccount is the account root's benchmark logs in as.
const benchAccount = "crabbox-bench"

// loginAccount is the account to log in as, created when it is the
// benchmark's own and missing.
func loginAccount(ctx context.Context, login string) (string, error) {
	if login != "" {
		return login, nil
	}
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return "", err
		}
		return u.Username, nil
	}
	if _, err := user.Lookup(benchAccount); err == nil {
		return benchAccount, nil
	}
	fmt.Fprintf(os.Stderr, "creating the account %s to log in as (useradd -m -s /bin/bash)\n", benchAccount)
	// "*" as the password: no password login, but not a locked account,
	// which sshd would refuse.
	for _, args := range [][]string{{"useradd", "-m", "-s", "/bin/bash", benchAccount}, {"usermod", "-p", "*", benchAccount}} {
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return benchAccount, nil
}

// requirements are the programs syncbench runs, with the Debian package
// providing each.
var requirements = []struct{ prog, pkg string }{
	{sshd.SSHDPath, "openssh-server"},
	{"ssh", "openssh-client"},
	{"rsync", "rsync"},
	{"tar", "tar"},
	{"git", "git"},
	{"go", "golang (or https://go.dev/dl)"},
}

func checkRequirements() error {
	var missing, pkgs []string
	for _, r := range requirements {
		if _, err := exec.LookPath(r.prog); err != nil {
			missing = append(missing, r.prog)
			pkgs = append(pkgs, r.pkg)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s; install with: apt-get install -y %s", strings.Join(missing, ", "), strings.Join(pkgs, " "))
	}
	return nil
}

// bench is the state of one benchmark: the sshd, the checkout and the tools.
type bench struct {
	cfg      config
	base     string // temporary directory holding everything
	src      string // the checkout
	remote   string // parent of destination directories ("the box")
	crabbox  string // binary
	srv      *sshd.Server
	sshArgs  []string
	login    string // user@127.0.0.1
	specs    []fileSpec
	mutation int        // mutations applied so far
	other    *warmLease // the -compare build's lease in the warm loop; nil for none
}

// warmLease is a crabbox binary's lease on the benchmark's sshd, kept
// between runs.
type warmLease struct{ bin, state, workRoot, id string }

func run(ctx context.Context, cfg config) (err error) {
	if err := checkRequirements(); err != nil {
		return err
	}
	if cfg.compare != "" {
		if cfg.compare, err = exec.LookPath(cfg.compare); err != nil {
			return fmt.Errorf("-compare: %w", err)
		}
		if cfg.compare, err = filepath.Abs(cfg.compare); err != nil {
			return fmt.Errorf("-compare: %w", err)
		}
	}
	if cfg.firstOnly || cfg.loopOnly {
		cfg.curve = nil
	}
	repo, err := moduleRoot()
	if err != nil {
		return err
	}
	base, err := os.MkdirTemp(os.TempDir(), "crabbox-syncbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(base)
	b := &bench{cfg: cfg, base: base, src: filepath.Join(base, "checkout"), remote: filepath.Join(base, "remote")}
	for _, d := range []string{b.src, b.remote, filepath.Join(base, "sshd")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}

	// Built into the temporary directory, not the repository's tmp/, so
	// that nothing else cleaning the tree can pull it away mid-run.
	b.crabbox = filepath.Join(base, "bin", "crabbox")
	fmt.Fprintf(os.Stderr, "building crabbox into %s\n", b.crabbox)
	if out, err := b.command(ctx, repo, "go", "build", "-o", b.crabbox, "./cmd/crabbox").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/crabbox: %v\n%s", err, out)
	}

	sshdDir := filepath.Join(base, "sshd")
	if err := os.MkdirAll(sshdDir, 0o700); err != nil {
		return err
	}
	login, err := loginAccount(ctx, cfg.login)
	if err != nil {
		return err
	}
	b.srv, err = sshd.LaunchAs(sshdDir, login)
	if err != nil {
		return err
	}
	if err := chownTree(b.remote, login); err != nil {
		return err
	}
	defer b.srv.Close()
	b.login = b.srv.User + "@127.0.0.1"
	b.sshArgs = []string{"-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=" + filepath.Join(sshdDir, "known_hosts"),
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "LogLevel=ERROR",
		"-i", b.srv.ClientKeyFile, "-p", strconv.Itoa(b.srv.Port)}
	fmt.Fprintf(os.Stderr, "sshd on 127.0.0.1:%d for %s, work in %s\n", b.srv.Port, login, base)

	loadBefore, cpuBefore := loadAverage(), readCPUTimes()
	if err := b.makeCheckout(ctx); err != nil {
		return err
	}
	rows, err := b.measure(ctx)
	if err != nil {
		return err
	}
	var points []curvePoint
	for _, n := range cfg.curve {
		pt, err := b.curvePoint(ctx, n)
		if err != nil {
			return fmt.Errorf("curve at %d files: %w", n, err)
		}
		points = append(points, pt)
	}
	printTable(os.Stdout, cfg, rows)
	printCurve(os.Stdout, cfg, points)
	fmt.Fprintf(os.Stdout, "\nload average (1, 5, 15 min): %s before, %s after\n", loadBefore, loadAverage())
	// In a virtual machine, time the host gives other guests (steal)
	// slows every tool at random: a run with much of it is not
	// comparable with one without.
	fmt.Fprintf(os.Stdout, "CPU time stolen by the hypervisor during the run: %s\n", stolen(cpuBefore, readCPUTimes()))
	return nil
}

// parseSizes parses -curve.
func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 20 {
			return nil, fmt.Errorf("%q is not a number of files >= 20", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// loadAverage is the machine's load average over 1, 5 and 15 minutes.
func loadAverage() string {
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(data)); len(f) >= 3 {
			return strings.Join(f[:3], " ")
		}
	}
	// BSDs and macOS: "{ 1.23 1.10 0.98 }".
	if out, err := exec.Command("sysctl", "-n", "vm.loadavg").Output(); err == nil {
		return strings.Trim(strings.TrimSpace(string(out)), "{} ")
	}
	return "unknown"
}

// chownTree gives dir to login, so that every tool can write there as it.
func chownTree(dir, login string) error {
	u, err := user.Lookup(login)
	if err != nil {
		return err
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("account %s: %w", login, err)
	}
	if uid == os.Geteuid() {
		return nil
	}
	// The parent must be reachable too.
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	return os.Chown(dir, uid, gid)
}

// moduleRoot finds the crabbox module root from the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(data, []byte("module github.com/crabbox-dev/crabbox\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run syncbench inside the crabbox repository (go run ./bench/syncbench)")
		}
		dir = parent
	}
}

func (b *bench) makeCheckout(ctx context.Context) error {
	start := time.Now()
	b.specs = planTree(b.cfg.files, b.cfg.seed)
	if err := writeTree(ctx, b.src, b.cfg.seed, b.specs); err != nil {
		return fmt.Errorf("write checkout: %w", err)
	}
	// Committing 20,000 loose objects would start git gc --auto in the
	// background, which repacks the checkout's objects for seconds, in
	// the middle of the first timed runs; crabbox reads no objects.
	git := [][]string{
		{"init", "-q"},
		{"config", "gc.auto", "0"},
		{"config", "maintenance.auto", "false"},
		{"add", "-A"},
		{"-c", "user.name=syncbench", "-c", "user.email=syncbench@localhost", "commit", "-q", "-m", "synthetic checkout"},
	}
	for _, args := range git {
		if out, err := b.command(ctx, b.src, "git", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %v\n%s", args[0], err, out)
		}
	}
	var total int64
	for _, s := range b.specs {
		total += int64(s.Size)
	}
	fmt.Fprintf(os.Stderr, "checkout: %d files, %.0f MB, committed, in %v\n", len(b.specs), float64(total)/1e6, time.Since(start).Round(time.Millisecond))
	return nil
}

// command prepares a program in its own process group, killed as a group
// when ctx ends. crabbox finds no CRABBOX_* settings from the caller's
// environment and no config file.
func (b *bench) command(ctx context.Context, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CRABBOX_") })
	cmd.Env = append(cmd.Env, "CRABBOX_CONFIG="+filepath.Join(b.base, "no-config"))
	return cmd
}

// timed runs a program to completion and returns its wall-clock time.
func (b *bench) timed(ctx context.Context, name string, args ...string) (time.Duration, error) {
	cmd := b.command(ctx, b.src, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	syscall.Sync() // start each timing without other runs' dirty pages
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	if b.cfg.verbose {
		line := filepath.Base(name) + " " + strings.Join(args, " ")
		line = strings.ReplaceAll(line, shellJoin(b.sshArgs), "<ssh opts>")
		line = strings.ReplaceAll(line, b.base, "$TMP")
		fmt.Fprintf(os.Stderr, "  %8v  %s\n", d.Round(time.Millisecond), line)
	}
	return d, nil
}

// crab runs crabbox with the ssh provider against the benchmark's sshd.
func (b *bench) crab(ctx context.Context, state, workRoot string, args ...string) *exec.Cmd {
	sub, rest := args[0], args[1:]
	full := []string{sub, "--provider", "ssh", "--ssh-host", "127.0.0.1", "--ssh-port", strconv.Itoa(b.srv.Port),
		"--ssh-user", b.srv.User, "--ssh-key", b.srv.ClientKeyFile, "--work-root", workRoot}
	cmd := b.command(ctx, b.src, b.crabbox, append(full, rest...)...)
	cmd.Env = append(cmd.Env, "CRABBOX_STATE_DIR="+state)
	return cmd
}

func (b *bench) rsyncArgs(dest string) []string {
	return []string{"-a", "--delete", "--exclude=/.git", "-e", shellJoin(append([]string{"ssh"}, b.sshArgs...)), "./", b.login + ":" + dest + "/"}
}

// row is one line of the result table.
type row struct {
	scenario, baseline string
	crabbox, base      []time.Duration
	phases             []string        // crabbox's timing report per run
	rss                []int64         // crabbox's peak resident set size per run, bytes
	cpu                []time.Duration // crabbox's user and system CPU time per run
	target             float64         // minimum baseline/crabbox ratio; 0 for none
	note               string
}

// sample is one timed crabbox run.
type sample struct {
	d      time.Duration
	phases string        // crabbox's own timing report
	rss    int64         // peak resident set size, bytes
	cpu    time.Duration // user and system CPU time
}

func (r *row) add(s sample) {
	r.crabbox = append(r.crabbox, s.d)
	r.phases = append(r.phases, s.phases)
	r.rss = append(r.rss, s.rss)
	r.cpu = append(r.cpu, s.cpu)
}

// rotate runs each of tools once, in order from the (i mod n)th, so that
// over successive runs i each tool goes first in turn; nil tools are
// left out. With two tools: in order on even i, the other way round on
// odd ones.
func rotate(i int, tools ...func() error) error {
	tools = slices.DeleteFunc(slices.Clone(tools), func(f func() error) bool { return f == nil })
	for k := range tools {
		if err := tools[(i+k)%len(tools)](); err != nil {
			return err
		}
	}
	return nil
}

// medianPhases is the timing report of the crabbox run with the median time.
func (r row) medianPhases() string {
	m := median(r.crabbox)
	best := 0
	for i, d := range r.crabbox {
		if (d - m).Abs() < (r.crabbox[best] - m).Abs() {
			best = i
		}
	}
	return r.phases[best]
}

func (b *bench) measure(ctx context.Context) ([]row, error) {
	full := row{scenario: "first full sync", baseline: "rsync -a"}
	tar := row{scenario: "first full sync", baseline: "tar|ssh|tar", target: 1.25, note: "crabbox <= 0.8x"}
	floor := row{scenario: "first full sync", baseline: "floor (below)"}
	compared := row{scenario: "first full sync", baseline: "-compare build"}
	noop := row{scenario: "no-op resync", baseline: "rsync -a --delete", target: 6}
	incr := row{scenario: incrementalScenario, baseline: "rsync -a --delete", target: 4}
	noopRun := row{scenario: "no-op run -- true", baseline: "rsync && ssh true", target: 12}
	// The -compare build in the warm loop: this build's times against it.
	noopVs := row{scenario: "no-op resync", baseline: "-compare build"}
	incrVs := row{scenario: incrementalScenario, baseline: "-compare build"}
	noopRunVs := row{scenario: "no-op run -- true", baseline: "-compare build"}

	var state, workRoot, rsyncDest, id string
	// The floor of any sync through sshd into the box's tar: the archive
	// already made (untimed), so that nothing is listed or read, sent
	// with the cipher crabbox's SSH client prefers into a tar reading
	// records as large as crabbox has it read (see sync's transferStep).
	archive := filepath.Join(b.base, "floor.tar")
	if out, err := b.command(ctx, b.src, "tar", "--exclude=./.git", "-cf", archive, ".").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tar -cf %s: %v\n%s", archive, err, out)
	}
	defer os.Remove(archive)
	fmt.Fprintln(os.Stderr, "first full sync")
	runs := b.cfg.runs
	if b.cfg.loopOnly {
		// One first sync of each, untimed, for the warm loop to start from.
		runs = 0
		state, workRoot, rsyncDest = filepath.Join(b.base, "state0"), filepath.Join(b.remote, "crabbox0"), filepath.Join(b.remote, "rsync0")
		if _, err := b.firstSync(ctx, b.crabbox, state, workRoot); err != nil {
			return nil, err
		}
		if _, err := b.timed(ctx, "rsync", b.rsyncArgs(rsyncDest)...); err != nil {
			return nil, err
		}
	}
	for i := range runs {
		last := i == b.cfg.runs-1
		state = filepath.Join(b.base, fmt.Sprintf("state%d", i))
		workRoot = filepath.Join(b.remote, fmt.Sprintf("crabbox%d", i))
		rsyncDest = filepath.Join(b.remote, fmt.Sprintf("rsync%d", i))
		tarDest := filepath.Join(b.remote, fmt.Sprintf("tar%d", i))
		floorDest := filepath.Join(b.remote, fmt.Sprintf("floor%d", i))
		otherState := filepath.Join(b.base, fmt.Sprintf("compare-state%d", i))
		otherRoot := filepath.Join(b.remote, fmt.Sprintf("compare%d", i))

		pipe := "tar --exclude=./.git -cf - . | " + b.untarOnBox(tarDest, "")
		floorPipe := b.untarOnBox(floorDest, "-b 128", "-c", "aes128-gcm@openssh.com") + " < " + shellQuote(archive)
		tools := []func() error{
			func() error {
				s, err := b.firstSync(ctx, b.crabbox, state, workRoot)
				full.add(s)
				tar.add(s)
				floor.add(s)
				if b.cfg.compare != "" {
					compared.add(s)
				}
				return err
			},
			func() error {
				d, err := b.timed(ctx, "rsync", b.rsyncArgs(rsyncDest)...)
				full.base = append(full.base, d)
				return err
			},
			func() error {
				d, err := b.timed(ctx, "sh", "-c", pipe)
				tar.base = append(tar.base, d)
				return err
			},
			func() error {
				d, err := b.timed(ctx, "sh", "-c", floorPipe)
				floor.base = append(floor.base, d)
				return err
			},
		}
		if b.cfg.compare != "" {
			tools = append(tools, func() error {
				s, err := b.firstSync(ctx, b.cfg.compare, otherState, otherRoot)
				compared.base = append(compared.base, s.d)
				return err
			})
		}
		// Each tool goes first in turn: the first run after the previous
		// round's copies are removed pays for the file system's cleanup.
		for k := range tools {
			if err := tools[(i+k)%len(tools)](); err != nil {
				return nil, err
			}
		}

		os.RemoveAll(tarDest)
		os.RemoveAll(floorDest)
		os.RemoveAll(otherState)
		os.RemoveAll(otherRoot)
		if !last {
			os.RemoveAll(state)
			os.RemoveAll(workRoot)
			os.RemoveAll(rsyncDest)
		}
	}
	var first []row
	if !b.cfg.loopOnly {
		first = []row{full, tar, floor}
		if b.cfg.compare != "" {
			first = append(first, compared)
		}
	}
	if b.cfg.firstOnly {
		return first, nil
	}
	id, err := b.leaseID(ctx, state, workRoot)
	if err != nil {
		return nil, err
	}
	var vs [3]*row // the -compare build's rows, nil without one
	if b.cfg.compare != "" {
		if b.other, err = b.warmCompare(ctx); err != nil {
			return nil, err
		}
		vs = [3]*row{&noopVs, &incrVs, &noopRunVs}
	}

	fmt.Fprintln(os.Stderr, "no-op resync")
	if err := b.resyncs(ctx, &noop, vs[0], state, workRoot, id, rsyncDest, false); err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "incremental resync")
	if err := b.resyncs(ctx, &incr, vs[1], state, workRoot, id, rsyncDest, true); err != nil {
		return nil, err
	}
	fmt.Fprintln(os.Stderr, "no-op run")
	if err := b.noopRuns(ctx, &noopRun, vs[2], state, workRoot, id, rsyncDest); err != nil {
		return nil, err
	}
	if err := b.verify(ctx, state, workRoot, id, rsyncDest); err != nil {
		return nil, err
	}
	rows := append(first, noop, incr, noopRun)
	if b.cfg.compare != "" {
		rows = append(rows, noopVs, incrVs, noopRunVs)
	}
	return rows, nil
}

// warmCompare gives the -compare build a lease of its own with the
// checkout synced (untimed), for the warm loop.
func (b *bench) warmCompare(ctx context.Context) (*warmLease, error) {
	l := &warmLease{bin: b.cfg.compare, state: filepath.Join(b.base, "compare-warm-state"), workRoot: filepath.Join(b.remote, "compare-warm")}
	if _, err := b.firstSync(ctx, l.bin, l.state, l.workRoot); err != nil {
		return nil, fmt.Errorf("-compare build: %w", err)
	}
	c := *b
	c.crabbox = l.bin
	id, err := c.leaseID(ctx, l.state, l.workRoot)
	if err != nil {
		return nil, fmt.Errorf("-compare build: %w", err)
	}
	l.id = id
	return l, nil
}

// otherTool is the -compare build's turn in a warm-loop round: crabbox
// with args (after "--id ID") into its own lease, its time added to vs as
// the baseline. Nil when there is no -compare build.
func (b *bench) otherTool(ctx context.Context, vs *row, args ...string) func() error {
	if b.other == nil || vs == nil {
		return nil
	}
	return func() error {
		c := *b
		c.crabbox = b.other.bin
		s, err := c.timedCrabEnv(ctx, b.other.state, b.other.workRoot, append([]string{"run", "--id", b.other.id}, args...)...)
		vs.base = append(vs.base, s.d)
		return err
	}
}

// firstSync times the crabbox binary bin's first sync of the checkout into
// workRoot, with state as its state directory, then waits, untimed, for
// the change watcher it starts (see awaitWatcher).
func (b *bench) firstSync(ctx context.Context, bin, state, workRoot string) (sample, error) {
	c := *b
	c.crabbox = bin
	s, err := c.timedCrabEnv(ctx, state, workRoot, "run", "--sync-only", "--keep", "--quiet")
	if err == nil {
		b.awaitWatcher(ctx, state)
	}
	return s, err
}

const incrementalScenario = "incremental (10 edited in place, 1 new, 1 deleted)"

// resyncs times -runs crabbox syncs and rsyncs into the lease id and
// rsyncDest, after applying a mutation to the checkout before each pair
// when mutate is set; with a -compare build, its syncs too, into vs.
func (b *bench) resyncs(ctx context.Context, r, vs *row, state, workRoot, id, rsyncDest string, mutate bool) error {
	for i := range b.cfg.runs {
		if mutate {
			b.mutation++
			var m mutation
			m, b.specs = planMutation(b.specs, b.cfg.seed, b.mutation)
			if err := m.apply(b.src, b.cfg.seed, b.mutation); err != nil {
				return err
			}
		}
		err := rotate(i, func() error {
			s, err := b.timedCrabEnv(ctx, state, workRoot, "run", "--id", id, "--sync-only", "--quiet")
			r.add(s)
			if vs != nil {
				vs.add(s)
			}
			return err
		}, func() error {
			d, err := b.timed(ctx, "rsync", b.rsyncArgs(rsyncDest)...)
			r.base = append(r.base, d)
			return err
		}, b.otherTool(ctx, vs, "--sync-only", "--quiet"))
		if err != nil {
			return err
		}
	}
	return nil
}

// noopRuns times -runs crabbox runs of true and rsyncs followed by ssh
// true; with a -compare build, its runs too, into vs.
func (b *bench) noopRuns(ctx context.Context, r, vs *row, state, workRoot, id, rsyncDest string) error {
	both := shellJoin(append([]string{"rsync"}, b.rsyncArgs(rsyncDest)...)) + " && ssh " + shellJoin(b.sshArgs) + " " + shellQuote(b.login) + " true"
	for i := range b.cfg.runs {
		err := rotate(i, func() error {
			s, err := b.timedCrabEnv(ctx, state, workRoot, "run", "--id", id, "--quiet", "--", "true")
			r.add(s)
			if vs != nil {
				vs.add(s)
			}
			return err
		}, func() error {
			d, err := b.timed(ctx, "sh", "-c", both)
			r.base = append(r.base, d)
			return err
		}, b.otherTool(ctx, vs, "--quiet", "--", "true"))
		if err != nil {
			return err
		}
	}
	return nil
}

// curvePoint is the tree-size curve at one size.
type curvePoint struct {
	files       int
	noopRun     row
	incremental row
}

// curvePoint makes a checkout of n files, syncs it once with each tool,
// untimed, and times no-op runs and incremental resyncs; everything it
// made is removed afterwards.
func (b *bench) curvePoint(ctx context.Context, n int) (curvePoint, error) {
	fmt.Fprintf(os.Stderr, "tree-size curve: %d files\n", n)
	pt := curvePoint{
		files:       n,
		noopRun:     row{scenario: "no-op run -- true", baseline: "rsync && ssh true"},
		incremental: row{scenario: incrementalScenario, baseline: "rsync -a --delete"},
	}
	c := *b
	c.cfg.files = n
	c.mutation = 0
	dir := filepath.Join(b.base, fmt.Sprintf("curve%d", n))
	c.src = filepath.Join(dir, "checkout")
	state := filepath.Join(dir, "state")
	workRoot := filepath.Join(b.remote, fmt.Sprintf("curve%d-crabbox", n))
	rsyncDest := filepath.Join(b.remote, fmt.Sprintf("curve%d-rsync", n))
	defer func() {
		os.RemoveAll(dir)
		os.RemoveAll(workRoot)
		os.RemoveAll(rsyncDest)
	}()
	if err := c.makeCheckout(ctx); err != nil {
		return pt, err
	}
	if _, err := c.timedCrabEnv(ctx, state, workRoot, "run", "--sync-only", "--keep", "--quiet"); err != nil {
		return pt, err
	}
	if _, err := c.timed(ctx, "rsync", c.rsyncArgs(rsyncDest)...); err != nil {
		return pt, err
	}
	id, err := c.leaseID(ctx, state, workRoot)
	if err != nil {
		return pt, err
	}
	if err := c.noopRuns(ctx, &pt.noopRun, nil, state, workRoot, id, rsyncDest); err != nil {
		return pt, err
	}
	if err := c.resyncs(ctx, &pt.incremental, nil, state, workRoot, id, rsyncDest, true); err != nil {
		return pt, err
	}
	return pt, c.verify(ctx, state, workRoot, id, rsyncDest)
}

// timedCrabEnv times one crabbox invocation.
// It also returns crabbox's own account of where the time went
// (--timing-json), as a short "phase=ms" summary.
// Its peak memory is the child's maximum resident set size.
func (b *bench) timedCrabEnv(ctx context.Context, state, workRoot string, args ...string) (sample, error) {
	timing := filepath.Join(b.base, "timing.json")
	os.Remove(timing)
	// Past 150,000 files a sync needs --force-sync-large (the curve's
	// 200,000-file checkout).
	args = append([]string{args[0], "--timing-json", timing, "--force-sync-large"}, args[1:]...)
	cmd := b.crab(ctx, state, workRoot, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	syscall.Sync()
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return sample{}, fmt.Errorf("crabbox %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	s := sample{d: d, phases: phaseSummary(timing), rss: maxRSS(cmd.ProcessState), cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	if b.cfg.verbose {
		fmt.Fprintf(os.Stderr, "  %8v  %4d MB  %s %s  [%s]\n", d.Round(time.Millisecond), s.rss>>20, filepath.Base(b.crabbox), strings.Join(args[4:], " "), s.phases)
	}
	return s, nil
}

// untarOnBox is the ssh command line, with extra ssh options, that
// extracts the archive on its standard input into dest on the box, with
// tar's options tarOpts (a shell word list, "" for none) before -C.
func (b *bench) untarOnBox(dest, tarOpts string, opts ...string) string {
	extract := "tar -xf - "
	if tarOpts != "" {
		extract += tarOpts + " "
	}
	return shellJoin(append(append([]string{"ssh"}, opts...), b.sshArgs...)) + " " + shellQuote(b.login) + " " +
		shellQuote("mkdir -p "+shellQuote(dest)+" && "+extract+"-C "+shellQuote(dest))
}

// awaitWatcher waits, untimed, until the change watcher that crabbox
// starts once a first sync is done answers (or refuses the checkout, or a
// minute passes), so that its walk of the checkout is not timed as part of
// the next tool's run.
func (b *bench) awaitWatcher(ctx context.Context, state string) {
	if !watch.Supported() {
		return
	}
	c := watch.Client{Socket: watch.SocketPath(filepath.Join(state, "watch"), b.src)}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := c.Clock(ctx); err == nil || ctx.Err() != nil || watch.Refused(c.Socket, time.Now()) != "" {
			return
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "  (crabbox's change watcher did not answer within a minute; going on)")
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// phaseSummary reads crabbox's --timing-json report and lists its non-zero
// phase durations.
func phaseSummary(file string) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return "no timing report"
	}
	var t map[string]any
	if json.Unmarshal(data, &t) != nil {
		return "bad timing report"
	}
	var parts []string
	for _, k := range []string{"leaseMs", "connectMs", "syncPlanMs", "syncTransferMs", "syncApplyMs", "syncMs", "commandMs", "totalMs"} {
		if v, ok := t[k].(float64); ok && v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%.0f", strings.TrimSuffix(k, "Ms"), v))
		}
	}
	return strings.Join(parts, " ")
}

// leaseID returns the one lease recorded in state.
func (b *bench) leaseID(ctx context.Context, state, workRoot string) (string, error) {
	out, err := b.crab(ctx, state, workRoot, "list", "--json").Output()
	if err != nil {
		return "", fmt.Errorf("crabbox list: %w", err)
	}
	var infos []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &infos); err != nil || len(infos) != 1 {
		return "", fmt.Errorf("crabbox list --json: want one lease, got %q (%v)", out, err)
	}
	return infos[0].ID, nil
}

// verify checks, untimed, that crabbox's copy and rsync's copy both match
// the checkout, so that no tool is fast for doing less.
func (b *bench) verify(ctx context.Context, state, workRoot, id, rsyncDest string) error {
	out, err := b.crab(ctx, state, workRoot, "run", "--id", id, "--quiet", "--no-sync", "--", "pwd").Output()
	if err != nil {
		return fmt.Errorf("crabbox run -- pwd: %w", err)
	}
	workdir := strings.TrimSpace(string(out))
	for _, dest := range []string{workdir, rsyncDest} {
		diff := b.command(ctx, b.src, "diff", "-rq", "--exclude=.git", "--exclude=.crabbox*", b.src, dest)
		if out, err := diff.CombinedOutput(); err != nil {
			return fmt.Errorf("copy in %s differs from the checkout: %v\n%s", dest, err, out)
		}
	}
	fmt.Fprintln(os.Stderr, "verified: crabbox's and rsync's copies match the checkout")
	return nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pairedRange is the range of the ratios base[i]/crabbox[i] of runs taken
// side by side, " (7.4-9.4)", or "" when the runs do not pair up.
func pairedRange(crabbox, base []time.Duration) string {
	if len(crabbox) == 0 || len(crabbox) != len(base) {
		return ""
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, c := range crabbox {
		q := float64(base[i]) / float64(c)
		lo, hi = min(lo, q), max(hi, q)
	}
	return fmt.Sprintf(" (%.2f-%.2f)", lo, hi)
}

// span is a median with the range it comes from: "84ms (79-92)".
func span(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) }
	return fmt.Sprintf("%sms (%s-%s)", ms(median(ds)), ms(slices.Min(ds)), ms(slices.Max(ds)))
}

// rssSpan is the median and range of peak memory, in MB.
func rssSpan(rss []int64) string {
	if len(rss) == 0 {
		return "-"
	}
	s := slices.Clone(rss)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	mb := func(n int64) string { return strconv.FormatInt((n+1<<19)>>20, 10) }
	return fmt.Sprintf("%s MB (%s-%s)", mb(med), mb(s[0]), mb(s[len(s)-1]))
}

func printTable(w io.Writer, cfg config, rows []row) {
	fmt.Fprintf(w, "\nsyncbench: %d files, median (min-max) of %d runs, OpenSSH sshd on 127.0.0.1\n", cfg.files, cfg.runs)
	fmt.Fprintf(w, "RATIO: baseline's median / crabbox's median (min-max of the runs' ratios, each run's tools side by side)\n\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tVS\tCRABBOX\tBASELINE\tRATIO\tTARGET\tMET")
	for _, r := range rows {
		c, bl := median(r.crabbox), median(r.base)
		ratio := float64(bl) / float64(c)
		target, met := "-", "-"
		if r.target > 0 {
			target = fmt.Sprintf(">= %gx", r.target)
			met = "no"
			if ratio >= r.target {
				met = "yes"
			}
		}
		if r.note != "" {
			target += " (" + r.note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.2fx%s\t%s\t%s\n", r.scenario, r.baseline, span(r.crabbox), span(r.base), ratio, pairedRange(r.crabbox, r.base), target, met)
	}
	tw.Flush()
	if !cfg.loopOnly {
		fmt.Fprintln(w, "\nfloor: the archive of the checkout, made beforehand (untimed), sent with ssh -c aes128-gcm@openssh.com")
		fmt.Fprintln(w, "(crabbox's cipher) into tar -x -b 128 (the records crabbox has the box's GNU tar read): what moving the")
		fmt.Fprintln(w, "bytes through sshd into the box's tar costs, with nothing listed, read or hashed: a first sync through")
		fmt.Fprintln(w, "sshd into tar cannot be faster")
	}
	if cfg.compare != "" {
		fmt.Fprintf(w, "\n-compare build: %s; a ratio above 1 means this build is faster\n", cfg.compare)
	}
	fmt.Fprintf(w, "\ncrabbox's own timing (--timing-json, ms) of its median run:\n")
	seen := map[string]bool{}
	for _, r := range rows {
		if seen[r.scenario] {
			continue
		}
		seen[r.scenario] = true
		fmt.Fprintf(w, "  %-52s %s\n", r.scenario, r.medianPhases())
	}
}

// Goals of the tree-size curve: a no-op run at curveLarge files costs
// less than curveRatio times one at curveSmall, in less than curveMemory
// bytes.
const (
	curveSmall, curveLarge = 20000, 200000
	curveRatio             = 3
	curveMemory            = 150 << 20
)

func printCurve(w io.Writer, cfg config, points []curvePoint) {
	if len(points) == 0 {
		return
	}
	fmt.Fprintf(w, "\ntree-size curve: median (min-max) of %d runs; crabbox's CPU time (user+system) and peak memory (max RSS) in its no-op runs\n\n", cfg.runs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILES\tNO-OP RUN\trsync && ssh true\tRATIO\tINCREMENTAL\trsync -a --delete\tRATIO\tNO-OP CPU\tPEAK MEMORY")
	byFiles := map[int]curvePoint{}
	for _, p := range points {
		byFiles[p.files] = p
		ratio := func(r row) float64 { return float64(median(r.base)) / float64(median(r.crabbox)) }
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.2fx\t%s\t%s\t%.2fx\t%s\t%s\n", p.files,
			span(p.noopRun.crabbox), span(p.noopRun.base), ratio(p.noopRun),
			span(p.incremental.crabbox), span(p.incremental.base), ratio(p.incremental), span(p.noopRun.cpu), rssSpan(p.noopRun.rss))
	}
	tw.Flush()
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	small, okSmall := byFiles[curveSmall]
	large, okLarge := byFiles[curveLarge]
	if okSmall && okLarge {
		growth := float64(median(large.noopRun.crabbox)) / float64(median(small.noopRun.crabbox))
		fmt.Fprintf(w, "no-op run at %d files / at %d: %.2fx (target < %dx): %s\n", curveLarge, curveSmall, growth, curveRatio, yes(growth < curveRatio))
	}
	if okLarge {
		peak := slices.Max(large.noopRun.rss)
		fmt.Fprintf(w, "peak memory of a no-op run at %d files: %d MB at most (target < %d MB): %s\n", curveLarge, peak>>20, curveMemory>>20, yes(peak < curveMemory))
	}
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=@:,+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}
