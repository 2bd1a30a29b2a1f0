package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/crabbox-dev/crabbox/provider"
)

// cloudProviders are the providers whose API endpoint is an option.
var cloudProviders = []string{"aws", "azure", "digitalocean", "gcp", "hetzner", "kubernetes", "kubevirt", "linode", "modal", "multipass", "nvidiabrev", "proxmox", "runpod", "scaleway", "vultr"}

// Every cloud provider lists its endpoint option, with its flag and
// environment variable, in `providers describe`.
func TestDescribeCloudEndpoints(t *testing.T) {
	for _, name := range cloudProviders {
		info, err := describeProvider(provider.Default(), name, os.Getenv)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(info.Options, func(o optionDescription) bool { return o.Key == "endpoint" })
		if i < 0 {
			t.Errorf("%s: no endpoint option in %+v", name, info.Options)
			continue
		}
		o := info.Options[i]
		wantEnv := "CRABBOX_" + strings.ToUpper(name) + "_ENDPOINT"
		if o.Flag != name+"-endpoint" || o.Env != wantEnv || o.Default != "" || !strings.Contains(o.Help, "endpoint") {
			t.Errorf("%s: endpoint option %+v, want flag %s-endpoint and env %s", name, o, name, wantEnv)
		}
	}
}

// apiRecorder is a fake cloud API that refuses every request and records
// its method and path.
type apiRecorder struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newAPIRecorder(t *testing.T) *apiRecorder {
	r := &apiRecorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":{"code":"forbidden","message":"refused by the test's fake"}}`))
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *apiRecorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// The endpoint option reaches the SDK from the command line, the
// environment and the config file: doctor's API check goes to the fake.
func TestCloudEndpointFromCLI(t *testing.T) {
	t.Parallel()
	aws := t.TempDir()
	awsEnv := []string{
		"AWS_CONFIG_FILE=" + filepath.Join(aws, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(aws, "credentials"),
		"AWS_EC2_METADATA_DISABLED=true", "AWS_PROFILE=", "AWS_ACCESS_KEY_ID=AKIDTESTONLY", "AWS_SECRET_ACCESS_KEY=test-only",
		"AWS_SESSION_TOKEN=", "AWS_REGION=us-east-1", "AWS_MAX_ATTEMPTS=1",
	}
	tests := []struct {
		name string
		env  []string
		args []string
		via  string // "flag", "env" or "config"
		path string // a request path the fake must see
	}{
		{"hetzner", []string{"HCLOUD_TOKEN=test-only"}, nil, "flag", "/server_types"},
		{"hetzner", []string{"HCLOUD_TOKEN=test-only"}, nil, "env", "/server_types"},
		{"hetzner", []string{"HCLOUD_TOKEN=test-only"}, nil, "config", "/server_types"},
		{"aws", awsEnv, nil, "flag", "/"},
		{"gcp", nil, []string{"--gcp-project", "my-project-1"}, "env", "/compute/v1/projects/my-project-1/zones/us-central1-a/instances"},
		{"scaleway", []string{"SCW_ACCESS_KEY=SCWTESTONLY000000000", "SCW_SECRET_KEY=00000000-0000-4000-8000-000000000000",
			"SCW_DEFAULT_PROJECT_ID=00000000-0000-4000-8000-000000000001"}, nil, "flag", "/instance/v1/zones/fr-par-1/servers"},
		{"vultr", []string{"VULTR_API_KEY=test-only"}, nil, "env", "/v2/account"},
		{"digitalocean", []string{"DIGITALOCEAN_TOKEN=test-only"}, nil, "flag", "/v2/account"},
		{"linode", []string{"LINODE_TOKEN=test-only"}, nil, "env", "/v4/profile"},
		{"proxmox", []string{"PROXMOX_VE_API_TOKEN=crabbox@pve!ci=test-only"}, nil, "flag", "/api2/json/version"},
		{"runpod", []string{"RUNPOD_API_KEY=test-only"}, nil, "env", "/pods"},
		{"nvidiabrev", []string{"BREV_API_KEY=bak-test-only", "BREV_ORG_ID=org-test"}, nil, "env", "/api/organizations/org-test/workspaces"},
		{"kubernetes", []string{"KUBECONFIG=" + filepath.Join(t.TempDir(), "no-kubeconfig")}, nil, "flag", "/version"},
		{"kubevirt", []string{"KUBECONFIG=" + filepath.Join(t.TempDir(), "no-kubeconfig")}, nil, "env", "/version"},
	}
	programs := programsPath(t) // the clouds' programs
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.via, func(t *testing.T) {
			t.Parallel()
			api := newAPIRecorder(t)
			env := append(append(stateEnv(t), programs), tt.env...)
			args := append([]string{"doctor", "--provider", tt.name}, tt.args...)
			switch tt.via {
			case "flag":
				args = append(args, "--"+tt.name+"-endpoint", api.URL)
			case "env":
				env = append(env, "CRABBOX_"+strings.ToUpper(tt.name)+"_ENDPOINT="+api.URL)
			case "config":
				file := filepath.Join(t.TempDir(), "config")
				if err := os.WriteFile(file, []byte(tt.name+"-endpoint "+api.URL+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				env = append(env, "CRABBOX_CONFIG="+file)
			}
			r := crabboxCmd(t, env, t.TempDir(), args...)
			if r.code != exitFailure {
				t.Errorf("exit %d, want %d (the fake refuses everything); stdout %q, stderr %q", r.code, exitFailure, r.stdout, r.stderr)
			}
			got := api.requests()
			if !slices.ContainsFunc(got, func(s string) bool { return strings.HasSuffix(s, " "+tt.path) }) {
				t.Errorf("the fake saw %q, want a request to %s; stdout %q, stderr %q", got, tt.path, r.stdout, r.stderr)
			}
		})
	}
}
