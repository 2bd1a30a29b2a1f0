package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/crabbox-dev/crabbox/provider"
)

// cliPackage is the main package of the crabbox CLI, whose `agent` command
// serves a box.
const cliPackage = "github.com/crabbox-dev/crabbox/cmd/crabbox"

// elfMachines maps the engine's architecture names (GOARCH spelling, as
// the engine's version reports them) to ELF machines.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"riscv64": elf.EM_RISCV,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
}

// agentPackage is the main package of the small agent the provider
// builds (agentDir), which can read its lease directory from its standard
// input (--lease-stdin).
const agentPackage = modulePath + "/" + agentDir

// agentBin is the executable run in boxes as `crabbox agent`.
type agentBin struct {
	path string // absolute path on this machine, bind-mounted into boxes
	// stdin says the agent takes its lease directory on its standard
	// input (the small agent); the crabbox CLI as agent does not, and
	// the lease files are copied into its container before it starts.
	stdin bool
}

// agentPath returns the executable to run in boxes as `crabbox agent`
// (see resolveAgent), building one without a deadline if need be.
func (b *Backend) agentPath(arch string) (string, error) {
	a, err := b.resolveAgent(context.Background(), arch)
	return a.path, err
}

// resolveAgent returns the executable to run in boxes as `crabbox agent`:
// the configured agent; else the small static agent built once from
// crabbox's source with the Go toolchain and kept in the user's cache
// directory; else, when none can be built, the running executable if it
// is the crabbox CLI built as a static linux binary for the engine's
// architecture. arch is the engine's architecture; empty means this
// machine's.
func (b *Backend) resolveAgent(ctx context.Context, arch string) (agentBin, error) {
	if b.cfg.Agent != "" {
		if err := checkAgent(b.cfg.Agent, arch); err != nil {
			return agentBin{}, fmt.Errorf("docker provider: agent (--docker-agent) %s: %w", b.cfg.Agent, err)
		}
		abs, err := filepath.Abs(b.cfg.Agent)
		if err != nil {
			return agentBin{}, fmt.Errorf("docker provider: agent (--docker-agent) %s: %w", b.cfg.Agent, err)
		}
		return agentBin{path: abs, stdin: isSmallAgent(abs)}, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return agentBin{}, fmt.Errorf("docker provider: no agent: set agent (--docker-agent) to a static linux build of crabbox: %w", err)
	}
	built, buildErr := b.buildAgent(ctx, exe, archOr(arch))
	if buildErr == nil {
		return agentBin{path: built, stdin: true}, nil
	}
	why := checkAgent(exe, arch)
	if why == nil {
		if info, err := buildinfo.ReadFile(exe); err == nil && info.Path == cliPackage {
			b.rt.Logger.Debug("docker provider: no small agent; this executable serves the boxes", "why", buildErr)
			return agentBin{path: exe}, nil
		}
		why = errors.New("it is not the crabbox CLI")
	}
	return agentBin{}, fmt.Errorf("docker provider: this program (%s) cannot serve as the agent in a box (%v), and no agent could be built: %w; "+
		"install crabbox as a static binary (CGO_ENABLED=0 go install ./cmd/crabbox) or set agent (--docker-agent) to a static linux/%s build of crabbox",
		exe, why, buildErr, archOr(arch))
}

// isSmallAgent reports whether the executable at path is a build of the
// small agent (agentPackage).
func isSmallAgent(path string) bool {
	info, err := buildinfo.ReadFile(path)
	return err == nil && info.Path == agentPackage
}

func archOr(arch string) string {
	if arch == "" {
		return runtime.GOARCH
	}
	return arch
}

// buildAgent returns a static linux/arch agent (./providers/docker/internal/agent,
// the same serving code as `crabbox agent`) built with the Go toolchain on
// PATH from the crabbox source this program was built from. It is kept in
// the cache directory under a key of the running executable's build, so a
// program builds it once.
func (b *Backend) buildAgent(ctx context.Context, exe, arch string) (string, error) {
	if _, ok := elfMachines[arch]; !ok {
		return "", fmt.Errorf("no agent for the engine's architecture %q", arch)
	}
	key, err := buildKey(exe)
	if err != nil {
		return "", fmt.Errorf("identify this program's build: %w", err)
	}
	cache := b.agentCache
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory to keep a built agent in: %w", err)
		}
		cache = filepath.Join(dir, "crabbox", "docker-agent")
	}
	dir := filepath.Join(cache, key)
	out := filepath.Join(dir, "crabbox-agent-linux-"+arch)
	if checkAgent(out, arch) == nil {
		return out, nil
	}
	goTool, err := b.lookPath("go")
	if err != nil {
		return "", fmt.Errorf("no Go toolchain (go) on PATH to build a static agent with")
	}
	src, env, err := b.agentSource(ctx, goTool, cache)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".build-*")
	if err != nil {
		return "", err
	}
	_ = tmp.Close()
	defer os.Remove(tmp.Name())
	b.rt.Logger.Info("docker provider: building a static agent for the boxes (once)", "source", src, "arch", arch, "to", out)
	var stderr bytes.Buffer
	err = b.rt.Commands.Run(ctx, provider.Command{
		Path: goTool,
		Args: []string{"build", "-o", tmp.Name(), "./" + agentDir},
		Env:  append(env, "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch),
		Dir:  src, Stdout: &stderr, Stderr: &stderr,
	})
	if err != nil {
		return "", fmt.Errorf("build a static agent in %s: %w: %s", src, err, tail(stderr.String()))
	}
	if err := checkAgent(tmp.Name(), arch); err != nil {
		return "", fmt.Errorf("the agent built in %s: %w", src, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// agentDir is the agent's main package, relative to the module root.
const agentDir = "providers/docker/internal/agent"

// agentSource returns the root of the crabbox module this program was
// built from and the environment to build in: the source tree itself when
// it is still where it was compiled (a checkout: `go build`, `go run`),
// else the module's released version from the Go module cache.
func (b *Backend) agentSource(ctx context.Context, goTool, cache string) (string, []string, error) {
	env := os.Environ()
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		if isModuleRoot(root) {
			return root, env, nil
		}
	}
	version := moduleVersion()
	if version == "" || version == "(devel)" {
		return "", nil, fmt.Errorf("the crabbox source this program was built from is not on this machine, and its version (%q) is not a release to fetch", version)
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", nil, err
	}
	env = append(env, "GOWORK=off", "GO111MODULE=on")
	var stdout, stderr bytes.Buffer
	err := b.rt.Commands.Run(ctx, provider.Command{
		Path: goTool, Args: []string{"mod", "download", "-json", modulePath + "@" + version},
		Env: env, Dir: cache, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		return "", nil, fmt.Errorf("fetch crabbox %s to build an agent: %w: %s", version, err, tail(stderr.String()))
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(stdout.Bytes(), &mod); err != nil || !isModuleRoot(mod.Dir) {
		return "", nil, fmt.Errorf("fetch crabbox %s to build an agent: no module directory in %q", version, tail(stdout.String()))
	}
	return mod.Dir, env, nil
}

// modulePath is crabbox's module.
const modulePath = "github.com/crabbox-dev/crabbox"

// isModuleRoot reports whether dir holds crabbox's module with the agent.
func isModuleRoot(dir string) bool {
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil || modfilePath(mod) != modulePath {
		return false
	}
	_, err = os.Stat(filepath.Join(dir, filepath.FromSlash(agentDir), "main.go"))
	return err == nil
}

// modfilePath returns the module path a go.mod declares.
func modfilePath(mod []byte) string {
	for line := range strings.Lines(string(mod)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// moduleVersion returns the version of crabbox's module in this program.
func moduleVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	mods := append([]*debug.Module{&info.Main}, info.Deps...)
	for _, m := range mods {
		if m.Path != modulePath {
			continue
		}
		if m.Replace != nil {
			return m.Replace.Version
		}
		return m.Version
	}
	return ""
}

// buildKey names the running executable's build: a digest of its Go build
// ID where it has one as an ELF note, else of its contents.
func buildKey(exe string) (string, error) {
	h := sha256.New()
	if f, err := elf.Open(exe); err == nil {
		s := f.Section(".note.go.buildid")
		var data []byte
		if s != nil {
			data, err = s.Data()
		}
		_ = f.Close()
		if err == nil && len(data) > 0 {
			h.Write(data)
			return hex.EncodeToString(h.Sum(nil))[:20], nil
		}
	}
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// tail returns the end of a command's output, for an error.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// checkAgent checks that path is a statically linked linux executable for
// the engine's architecture, so that it runs in any image.
func checkAgent(path, arch string) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return errors.New("not a linux (ELF) executable")
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("not an executable (ELF type %s)", f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked; build it with CGO_ENABLED=0 so it runs in any image")
		}
	}
	if want, ok := elfMachines[arch]; ok && f.Machine != want {
		return fmt.Errorf("built for %s, but the engine runs %s", f.Machine, arch)
	}
	return nil
}
