// Command startbench times how long starting the crabbox CLI takes, as a
// user feels it, against a hello-world Go binary on the same machine.
//
//	go run ./bench/startbench [-n 15] [-bin NAME=PATH]...
//
// It builds, into a temporary directory, a hello-world Go program and
// this checkout's crabbox (`CGO_ENABLED=0 go build ./cmd/crabbox`, static
// as the README installs it), then runs `crabbox version`, `crabbox --help` and hello
// -n rounds, the commands taking turns to go first, each as a whole
// process: the wall time from fork/exec to exit, taken by this program
// around the child, never the child's own timing. -bin adds another
// crabbox binary (a build of the commit before, say) whose version and
// --help are timed in the same rounds.
//
// For each command it prints the median and range of the wall time, of
// the CPU time (user and system) and of the peak memory (the child's
// maximum resident set size from getrusage; Linux only, "unavailable"
// elsewhere), the ratio of its median wall time to hello's, and whether
// the goals of issue 37 hold: within 3x hello's wall time and under 20 MB
// of RSS. The CPU model and the load average
// before and after are printed with them: numbers from a busy machine are
// not comparable with an idle one's.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Goals of issue 37 for starting the CLI.
const (
	goalRatio = 3.0        // at most this many times hello's median wall time
	goalRSS   = 20_000_000 // peak memory under this many bytes (20 MB)
)

func main() {
	rounds := flag.Int("n", 15, "rounds; each runs every command once")
	var extra binFlags
	flag.Var(&extra, "bin", "another crabbox binary to time, as NAME=PATH or PATH (repeatable)")
	flag.Parse()
	if *rounds < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: startbench [-n ROUNDS>=1] [-bin NAME=PATH]...")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout, *rounds, extra)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "startbench:", err)
		os.Exit(1)
	}
}

// bin is a crabbox binary to time, by the name the table shows.
type bin struct{ name, path string }

type binFlags []bin

func (f *binFlags) String() string { return fmt.Sprint(*f) }

func (f *binFlags) Set(s string) error {
	name, path, ok := strings.Cut(s, "=")
	if !ok {
		name, path = filepath.Base(s), s
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return err
	}
	if p, err = filepath.Abs(p); err != nil {
		return err
	}
	*f = append(*f, bin{name, p})
	return nil
}

// command is one program to time, with its samples.
type command struct {
	label string
	argv  []string
	wall  []time.Duration
	cpu   []time.Duration // user and system CPU time
	rss   []int64         // peak resident set size in bytes; empty where unavailable
}

func run(ctx context.Context, w io.Writer, rounds int, extra []bin) error {
	dir, err := os.MkdirTemp("", "crabbox-startbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	hello, crabbox, err := build(ctx, dir)
	if err != nil {
		return err
	}
	bins := append([]bin{{"crabbox", crabbox}}, extra...)
	cmds := []*command{{label: "hello", argv: []string{hello}}}
	for _, b := range bins {
		cmds = append(cmds,
			&command{label: b.name + " version", argv: []string{b.path, "version"}},
			&command{label: b.name + " --help", argv: []string{b.path, "--help"}})
	}
	env := cleanEnv(dir)

	loadBefore := loadAverage()
	// One untimed round first, so that every binary is in the page cache.
	for _, c := range cmds {
		if _, err := runOnce(ctx, c.argv, env); err != nil {
			return err
		}
	}
	for i := range rounds {
		for k := range cmds {
			c := cmds[(i+k)%len(cmds)] // each command goes first in turn
			ps, err := runOnce(ctx, c.argv, env)
			if err != nil {
				return err
			}
			c.wall = append(c.wall, ps.wall)
			c.cpu = append(c.cpu, ps.cpu)
			if ps.rss >= 0 {
				c.rss = append(c.rss, ps.rss)
			}
		}
	}

	fmt.Fprintf(w, "startbench: %d rounds, commands taking turns; wall time of the whole process (fork/exec to exit)\n", rounds)
	fmt.Fprintf(w, "%s %s/%s, %d CPUs: %s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpuModel())
	for _, b := range bins {
		if fi, err := os.Stat(b.path); err == nil {
			fmt.Fprintf(w, "%s: %s, %.1f MB\n", b.name, b.path, float64(fi.Size())/1e6)
		}
	}
	fmt.Fprintln(w)
	printTable(w, cmds)
	fmt.Fprintf(w, "\ngoals: at most %gx hello's median wall time and under %d MB peak RSS (MB = 10^6 bytes)\n", goalRatio, goalRSS/1_000_000)
	fmt.Fprintf(w, "load average (1, 5, 15 min): %s before, %s after\n", loadBefore, loadAverage())
	return nil
}

// build compiles the hello-world program and this checkout's crabbox into
// dir, both static as the README builds crabbox (CGO_ENABLED=0), and
// returns their paths.
func build(ctx context.Context, dir string) (hello, crabbox string, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	src := filepath.Join(dir, "hellosrc")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", "", err
	}
	files := map[string]string{
		"go.mod":  "module hello\n\ngo 1.22\n",
		"main.go": "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello, world\") }\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			return "", "", err
		}
	}
	hello, crabbox = filepath.Join(dir, "hello"), filepath.Join(dir, "crabbox")
	for _, b := range []struct{ dir, out, pkg string }{{src, hello, "."}, {root, crabbox, "./cmd/crabbox"}} {
		fmt.Fprintf(os.Stderr, "CGO_ENABLED=0 go build -o %s %s\n", b.out, b.pkg)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return hello, crabbox, nil
}

// cleanEnv is the caller's environment without crabbox settings, with a
// config file and state directory that do not exist yet.
func cleanEnv(dir string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "CRABBOX_") })
	return append(env, "CRABBOX_CONFIG="+filepath.Join(dir, "no-config"), "CRABBOX_STATE_DIR="+filepath.Join(dir, "state"))
}

// sample is what one run of a command cost.
type sample struct {
	wall, cpu time.Duration
	rss       int64 // peak resident set size in bytes, -1 where unavailable
}

// runOnce runs argv to completion, its output discarded, and returns what
// it cost, measured from outside: wall time from fork/exec to its exit, and
// the kernel's account of its CPU time and peak memory.
func runOnce(ctx context.Context, argv, env []string) (sample, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	ps := cmd.ProcessState
	return sample{wall: d, cpu: ps.UserTime() + ps.SystemTime(), rss: maxRSS(ps)}, nil
}

func printTable(w io.Writer, cmds []*command) {
	hello := median(cmds[0].wall)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "COMMAND\tWALL median (range)\tvs HELLO\tCPU median (range)\tMAX RSS median (range)\tGOALS MET")
	for i, c := range cmds {
		ratio := float64(median(c.wall)) / float64(hello)
		met := "-"
		if i > 0 {
			met = goalsMet(ratio, c.rss)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1fx\t%s\t%s\t%s\n", c.label, msSpan(c.wall), ratio, msSpan(c.cpu), mbSpan(c.rss), met)
	}
	tw.Flush()
}

// goalsMet says whether a command's wall-time ratio and memory meet the goals.
func goalsMet(ratio float64, rss []int64) string {
	wall := "wall yes"
	if ratio > goalRatio {
		wall = "wall no"
	}
	switch {
	case len(rss) == 0:
		return wall + ", RSS unknown"
	case median(rss) >= goalRSS:
		return wall + ", RSS no"
	}
	return wall + ", RSS yes"
}

// median is the middle value of xs (the mean of the two middle ones for an
// even count), without reordering xs; zero for none.
func median[T time.Duration | int64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// msSpan is a median with its range, in milliseconds: "7.1 ms (6.5-9.0)".
func msSpan(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	return fmt.Sprintf("%.1f ms (%.1f-%.1f)", ms(median(ds)), ms(slices.Min(ds)), ms(slices.Max(ds)))
}

// mbSpan is a median with its range, in MB of 10^6 bytes: "1.6 MB (1.5-1.7)".
func mbSpan(bs []int64) string {
	if len(bs) == 0 {
		return "unavailable"
	}
	mb := func(b int64) float64 { return float64(b) / 1e6 }
	return fmt.Sprintf("%.1f MB (%.1f-%.1f)", mb(median(bs)), mb(slices.Min(bs)), mb(slices.Max(bs)))
}

// loadAverage is the load average over 1, 5 and 15 minutes from
// /proc/loadavg, or "unavailable".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unavailable"
}

// cpuModel is the CPU's model name from /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// moduleRoot finds the crabbox module's root from the working directory.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/crabbox-dev/crabbox\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run startbench inside the crabbox repository (go run ./bench/startbench)")
		}
		dir = parent
	}
}
