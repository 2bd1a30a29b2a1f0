package docker

import (
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"os"
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

// agentPath returns the executable to run in boxes as `crabbox agent`:
// the configured agent, or else the running executable if it is the
// crabbox CLI. arch is the engine's architecture; empty skips that check.
func (b *Backend) agentPath(arch string) (string, error) {
	if b.cfg.Agent != "" {
		if err := checkAgent(b.cfg.Agent, arch); err != nil {
			return "", fmt.Errorf("docker provider: agent (--docker-agent) %s: %w", b.cfg.Agent, err)
		}
		return b.cfg.Agent, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("docker provider: no agent: set agent (--docker-agent) to a static linux build of crabbox: %w", err)
	}
	if err := checkAgent(exe, arch); err != nil {
		return "", fmt.Errorf("docker provider: this program (%s) cannot serve as the agent in a box: %w; set agent (--docker-agent) to a static linux/%s build of crabbox (CGO_ENABLED=0 GOOS=linux go build ./cmd/crabbox)", exe, err, archOr(arch))
	}
	if info, err := buildinfo.ReadFile(exe); err != nil || info.Path != cliPackage {
		return "", fmt.Errorf("docker provider: this program (%s) is not the crabbox CLI, so it cannot serve as the agent in a box; set agent (--docker-agent) to a static linux/%s build of crabbox", exe, archOr(arch))
	}
	return exe, nil
}

func archOr(arch string) string {
	if arch == "" {
		return "<arch>"
	}
	return arch
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
