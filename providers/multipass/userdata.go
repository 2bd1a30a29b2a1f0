package multipass

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ScriptPath is where cloud-init writes the bootstrap script on the box
// before it runs it; the script removes nothing else, and the run command
// removes it afterwards (it holds the box's private host key).
const ScriptPath = "/var/lib/crabbox/bootstrap.sh"

// cloudConfig wraps the bootstrap script as the cloud-config user data
// multipass takes: `launch --cloud-init` parses its input as YAML and
// refuses anything else, so a "#!" script cannot be the user data itself
// (src/client/cli/cmd/launch.cpp). cloud-init writes the script
// (write_files) and runs it once as root (runcmd, in the final stage,
// which multipass waits for). The YAML is the JSON form, which YAML
// parsers read as it is.
func cloudConfig(script string) (string, error) {
	cfg := struct {
		WriteFiles []writeFile `json:"write_files"`
		RunCmd     [][]string  `json:"runcmd"`
	}{
		WriteFiles: []writeFile{{Path: ScriptPath, Permissions: "0700", Content: script}},
		RunCmd:     [][]string{{"sh", "-c", `sh ` + ScriptPath + `; status=$?; rm -f ` + ScriptPath + `; exit "$status"`}},
	}
	var out bytes.Buffer
	out.WriteString("#cloud-config\n")
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(cfg); err != nil {
		return "", fmt.Errorf("render the cloud-config: %w", err)
	}
	return out.String(), nil
}

// writeFile is one entry of cloud-config's write_files.
type writeFile struct {
	Path        string `json:"path"`
	Permissions string `json:"permissions"`
	Content     string `json:"content"`
}
