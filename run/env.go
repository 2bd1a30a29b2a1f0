package run

import (
	"fmt"
	"strings"
)

// AllowEnv returns the NAME=value pairs of environ (as from os.Environ)
// whose NAME is in names. Names match exactly, including case. When environ
// holds a name twice, the later value wins, as for os/exec.
func AllowEnv(environ []string, names []string) map[string]string {
	allowed := make(map[string]bool, len(names))
	for _, n := range names {
		allowed[n] = true
	}
	env := map[string]string{}
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if ok && name != "" && allowed[name] {
			env[name] = value
		}
	}
	return env
}

// reservedEnvPrefix marks the variables the wrapper script uses to hand the
// command to the process that runs it.
const reservedEnvPrefix = "CRABBOX_RUN_"

func checkEnv(env map[string]string) error {
	for name, value := range env {
		if !validEnvName(name) {
			return fmt.Errorf("environment variable name %q is not a valid shell name ([A-Za-z_][A-Za-z0-9_]*)", name)
		}
		if strings.HasPrefix(name, reservedEnvPrefix) {
			return fmt.Errorf("environment variable %q: names starting with %s are reserved", name, reservedEnvPrefix)
		}
		if strings.ContainsRune(value, 0) {
			return fmt.Errorf("environment variable %q: value contains a NUL byte", name)
		}
	}
	return nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r == '_', 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && '0' <= r && r <= '9':
		default:
			return false
		}
	}
	return true
}
