package coordinator_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The upstream compatibility suite: every call the upstream crabbox CLI
// (github.com/openclaw/crabbox) makes to a coordinator that this one
// serves, replayed with the request body upstream builds (transcribed from
// its internal/cli/coordinator.go and the callers named per case), and the
// answer decoded as upstream decodes it: json.Decoder into the transcribed
// types of upstreamtypes_test.go, after a 2xx status. A case fails where
// the upstream client would fail.
//
// To add a call, add one entry to upstreamCalls.

// Values of upstream's default configuration that its request bodies
// carry; the provider is this suite's fake one.
const (
	upProvider   = fakeProvider
	upImage      = "ubuntu-24.04"
	upClass      = "beast"
	upServerType = "ccx33"
	upLocation   = "fsn1"
)

// compatFixture is a coordinator with one lease alice created and one run
// on it, both made through upstream's calls.
type compatFixture struct {
	e       *env
	alice   string
	attempt string // the lease's create attempt
	lease   CoordinatorLease
	run     CoordinatorRun
}

// upstreamCall is one upstream client call.
type upstreamCall struct {
	name   string
	method string
	path   func(f *compatFixture) string
	// admin sends upstream's admin token (CRABBOX_COORDINATOR_ADMIN_TOKEN)
	// instead of alice's.
	admin bool
	// setup prepares the fixture before the call (optional).
	setup func(t *testing.T, f *compatFixture)
	// body is the request body as upstream builds it; nil sends none.
	body func(f *compatFixture) any
	// reply is how upstream reads the answer.
	reply upstreamReply
}

// upstreamReply checks an answer's body as upstream reads it.
type upstreamReply interface {
	read(t *testing.T, f *compatFixture, raw []byte)
}

// decodes reads the answer as upstream does, into a T, then checks what
// upstream would go on to use (the func may be nil).
type decodes[T any] func(t *testing.T, f *compatFixture, got T)

func (d decodes[T]) read(t *testing.T, f *compatFixture, raw []byte) {
	t.Helper()
	var got T
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&got); err != nil {
		t.Fatalf("upstream cannot decode the answer as %T: %v\nbody: %s", got, err, raw)
	}
	if d != nil {
		d(t, f, got)
	}
}

// text is an answer upstream copies as text (run logs).
type text func(t *testing.T, f *compatFixture, body string)

func (x text) read(t *testing.T, f *compatFixture, raw []byte) { x(t, f, string(raw)) }

// upstreamLeaseBody is the body of upstream's createLease: POST
// /v1/leases with a create attempt, or PUT /v1/leases/{id} (EnsureLease)
// without one when attempt is empty.
func upstreamLeaseBody(leaseID, slug, attempt string) map[string]any {
	body := map[string]any{
		"leaseID":                         leaseID,
		"slug":                            slug,
		"profile":                         "default",
		"provider":                        upProvider,
		"target":                          "linux",
		"windowsMode":                     "normal",
		"desktop":                         false,
		"desktopEnv":                      "xfce",
		"browser":                         false,
		"code":                            false,
		"tailscale":                       false,
		"tailscaleTags":                   []string(nil),
		"tailscaleHostname":               "",
		"tailscaleExitNode":               "",
		"tailscaleExitNodeAllowLanAccess": false,
		"class":                           upClass,
		"serverType":                      upServerType,
		"serverTypeExplicit":              false,
		"hostId":                          "",
		"hostID":                          "",
		"location":                        upLocation,
		"image":                           upImage,
		"awsRegion":                       "eu-west-1",
		"awsAMI":                          "",
		"awsSnapshot":                     "",
		"awsSGID":                         "",
		"awsSubnetID":                     "",
		"awsProfile":                      "",
		"awsRootGB":                       400,
		"awsSSHCIDRs":                     []string(nil),
		"awsSSHCIDRsPinned":               false,
		"awsMacHostID":                    "",
		"azureLocation":                   "eastus",
		"azureSnapshot":                   "",
		"sshUser":                         "crabbox",
		"sshPort":                         "2222",
		"sshFallbackPorts":                []string{"22"},
		"providerKey":                     "crabbox-steipete",
		"workRoot":                        "/work/crabbox",
		"ttlSeconds":                      5400,
		"idleTimeoutSeconds":              1800,
		"keep":                            false,
		"sshPublicKey":                    pubKey,
		"pond":                            "",
		"exposedPorts":                    []string(nil),
		"architecture":                    "amd64",
	}
	if attempt != "" {
		body["createAttemptID"] = attempt
	}
	return body
}

// upstreamRunBody is the body of upstream's CreateRun.
func upstreamRunBody(leaseID string) map[string]any {
	return map[string]any{
		"leaseID":     leaseID,
		"provider":    upProvider,
		"target":      "linux",
		"windowsMode": "normal",
		"class":       upClass,
		"serverType":  upServerType,
		"command":     []string{"go", "test", "./..."},
		"label":       "ci",
	}
}

// upstreamFinishBody is the body of upstream's FinishRun: the log's last
// 64 KiB as "log", all of it as 64 KiB "logChunks".
func upstreamFinishBody(exitCode int, log string) map[string]any {
	const chunk = 64 << 10
	var chunks []string
	for rest := log; rest != ""; {
		n := min(chunk, len(rest))
		chunks = append(chunks, rest[:n])
		rest = rest[n:]
	}
	return map[string]any{
		"exitCode":     exitCode,
		"syncMs":       int64(1200),
		"commandMs":    int64(3400),
		"log":          log[max(0, len(log)-chunk):],
		"logChunks":    chunks,
		"logTruncated": false,
		"results": &TestResultSummary{
			Format: "junit", Files: []string{"report.xml"}, Suites: 1, Tests: 3, Failures: 1,
			Failed: []TestFailure{{Suite: "pkg", Name: "TestX", Kind: "failure"}},
		},
		"telemetry": &RunTelemetrySummary{Start: upstreamSample(), End: upstreamSample()},
	}
}

// upstreamSample is a host sample as upstream's collector makes it.
func upstreamSample() *LeaseTelemetry {
	load, mem, cpus := 0.42, int64(1<<30), int64(4)
	return &LeaseTelemetry{CapturedAt: "2026-05-10T12:00:00Z", Source: "ssh-linux", Load1: &load, CPUCount: &cpus, MemoryUsedBytes: &mem}
}

// upstreamHeartbeatBody is the body of upstream's heartbeatLease.
func upstreamHeartbeatBody(expectedProvider string, idleSeconds int, sample *LeaseTelemetry) map[string]any {
	body := map[string]any{}
	if expectedProvider != "" {
		body["expectedProvider"] = expectedProvider
	}
	if idleSeconds > 0 {
		body["idleTimeoutSeconds"] = idleSeconds
	}
	if sample != nil {
		body["telemetry"] = sample
	}
	return body
}

// wantImage checks a lease's image is the object for upImage.
func wantImage(t *testing.T, l CoordinatorLease) {
	t.Helper()
	want := &CoordinatorLeaseImage{ID: upImage, Source: "explicit", Provider: upProvider, Region: upLocation}
	if diff := cmp.Diff(want, l.Image); diff != "" {
		t.Errorf("lease %s image (-want +got):\n%s", l.ID, diff)
	}
}

func leaseReply(check func(t *testing.T, f *compatFixture, l CoordinatorLease)) upstreamReply {
	return decodes[CoordinatorLeaseResponse](func(t *testing.T, f *compatFixture, got CoordinatorLeaseResponse) {
		t.Helper()
		if got.Lease.ID == "" {
			t.Fatal("the answer has no lease")
		}
		wantImage(t, got.Lease)
		if check != nil {
			check(t, f, got.Lease)
		}
	})
}

// shareReply reads a share answer as upstream's LeaseShare,
// UpdateLeaseShare and DeleteLeaseShare do: only its share.
func shareReply(check func(t *testing.T, f *compatFixture, s CoordinatorShare)) upstreamReply {
	return decodes[struct {
		Share CoordinatorShare `json:"share"`
	}](func(t *testing.T, f *compatFixture, got struct {
		Share CoordinatorShare `json:"share"`
	}) {
		t.Helper()
		check(t, f, got.Share)
	})
}

// shareWithBob shares the fixture's lease with bob (use) and the org
// (manage), as upstream's UpdateLeaseShare does.
func shareWithBob(t *testing.T, f *compatFixture) {
	f.call(t, "PUT", "/v1/leases/"+f.lease.ID+"/share", f.alice,
		CoordinatorShare{Users: map[string]CoordinatorShareRole{"bob": "use"}, Org: "manage"}, shareReply(func(*testing.T, *compatFixture, CoordinatorShare) {}))
}

func fixedPath(p string) func(*compatFixture) string { return func(*compatFixture) string { return p } }

func leaseCallPath(suffix string) func(*compatFixture) string {
	return func(f *compatFixture) string { return "/v1/leases/" + f.lease.ID + suffix }
}

func runCallPath(suffix string) func(*compatFixture) string {
	return func(f *compatFixture) string { return "/v1/runs/" + f.run.ID + suffix }
}

// finishRun finishes the fixture's run as upstream does.
func finishRun(log string) func(t *testing.T, f *compatFixture) {
	return func(t *testing.T, f *compatFixture) {
		f.call(t, "POST", runCallPath("/finish")(f), f.alice, upstreamFinishBody(0, log), decodes[CoordinatorRunResponse](nil))
	}
}

// bigLog is longer than one chunk, so only logChunks carries its head.
var bigLog = "head of the log\n" + strings.Repeat("x", 70<<10) + "\ntail of the log\n"

var upstreamCalls = []upstreamCall{
	{
		name: "Health", method: "GET", path: fixedPath("/v1/health"),
		reply: decodes[map[string]any](nil),
	},
	{
		name: "Whoami", method: "GET", path: fixedPath("/v1/whoami"),
		reply: decodes[CoordinatorWhoami](func(t *testing.T, _ *compatFixture, got CoordinatorWhoami) {
			if got.Owner != "alice" || got.Org != "acme" || got.Admin {
				t.Errorf("whoami %+v", got)
			}
		}),
	},
	{
		name: "ProviderReadiness", method: "GET",
		path: fixedPath("/v1/providers/" + upProvider + "/readiness?class=beast&fallback=on-demand-after-120s&market=spot&region=eu-west-1&serverType=ccx33&serverTypeExplicit=false&target=linux&windowsMode=normal"),
		reply: decodes[CoordinatorProviderReadiness](func(t *testing.T, _ *compatFixture, got CoordinatorProviderReadiness) {
			if got.Provider != upProvider || !got.Configured {
				t.Errorf("readiness %+v", got)
			}
		}),
	},
	{
		name: "CreateLease", method: "POST", path: fixedPath("/v1/leases"),
		body: func(*compatFixture) any {
			return upstreamLeaseBody("cbx_0123456789ab", "blue-crab", "cat_0123456789abcdef0123456789abcdef")
		},
		reply: leaseReply(func(t *testing.T, _ *compatFixture, l CoordinatorLease) {
			if l.ID != "cbx_0123456789ab" || l.Slug != "blue-crab" || l.State != "active" || l.Host == "" || l.ExpiresAt == "" {
				t.Errorf("created lease %+v", l)
			}
		}),
	},
	{
		name: "CreateLease replayed after a lost answer", method: "POST", path: fixedPath("/v1/leases"),
		body: func(f *compatFixture) any { return upstreamLeaseBody(f.lease.ID, f.lease.Slug, f.attempt) },
		reply: leaseReply(func(t *testing.T, f *compatFixture, l CoordinatorLease) {
			if l.ID != f.lease.ID {
				t.Errorf("replay answered lease %s, want %s", l.ID, f.lease.ID)
			}
		}),
	},
	{
		name: "EnsureLease (fixed-ID PUT)", method: "PUT", path: fixedPath("/v1/leases/cbx_00000000beef"),
		body: func(*compatFixture) any { return upstreamLeaseBody("cbx_00000000beef", "fixed-crab", "") },
		reply: leaseReply(func(t *testing.T, _ *compatFixture, l CoordinatorLease) {
			if l.ID != "cbx_00000000beef" || l.State != "active" {
				t.Errorf("fixed-ID lease %+v", l)
			}
		}),
	},
	{
		name: "GetLease", method: "GET", path: leaseCallPath(""),
		reply: leaseReply(nil),
	},
	{
		name: "GetLease by slug", method: "GET",
		path:  func(f *compatFixture) string { return "/v1/leases/" + f.lease.Slug },
		reply: leaseReply(nil),
	},
	{
		name: "Leases (list, limit=1000)", method: "GET", path: fixedPath("/v1/leases?limit=1000"),
		reply: decodes[CoordinatorLeasesResponse](func(t *testing.T, f *compatFixture, got CoordinatorLeasesResponse) {
			if len(got.Leases) != 1 || got.Leases[0].ID != f.lease.ID {
				t.Fatalf("leases %+v", got.Leases)
			}
			wantImage(t, got.Leases[0])
		}),
	},
	{
		name: "Leases (list active)", method: "GET", path: fixedPath("/v1/leases?limit=1000&state=active"),
		reply: decodes[CoordinatorLeasesResponse](func(t *testing.T, f *compatFixture, got CoordinatorLeasesResponse) {
			if len(got.Leases) != 1 || got.Leases[0].ID != f.lease.ID {
				t.Fatalf("leases %+v", got.Leases)
			}
		}),
	},
	{
		name: "TouchLease (heartbeat)", method: "POST", path: leaseCallPath("/heartbeat"),
		body:  func(*compatFixture) any { return upstreamHeartbeatBody("", 0, nil) },
		reply: leaseReply(nil),
	},
	{
		name: "TouchLeaseWithTelemetryForProvider", method: "POST", path: leaseCallPath("/heartbeat"),
		body: func(*compatFixture) any { return upstreamHeartbeatBody(upProvider, 0, upstreamSample()) },
		reply: leaseReply(func(t *testing.T, _ *compatFixture, l CoordinatorLease) {
			if diff := cmp.Diff(upstreamSample(), l.Telemetry); diff != "" {
				t.Errorf("lease telemetry (-want +got):\n%s", diff)
			}
		}),
	},
	{
		name: "UpdateLeaseIdleTimeoutWithTelemetry", method: "POST", path: leaseCallPath("/heartbeat"),
		body: func(*compatFixture) any { return upstreamHeartbeatBody("", 3600, upstreamSample()) },
		reply: leaseReply(func(t *testing.T, _ *compatFixture, l CoordinatorLease) {
			if l.IdleTimeoutSeconds != 3600 || l.Telemetry == nil {
				t.Errorf("idle timeout %d, telemetry %v; want 3600 and the sample", l.IdleTimeoutSeconds, l.Telemetry)
			}
		}),
	},
	{
		name: "LeaseShare (unshared)", method: "GET", path: leaseCallPath("/share"),
		reply: shareReply(func(t *testing.T, _ *compatFixture, s CoordinatorShare) {
			if len(s.Users) != 0 || s.Org != "" {
				t.Errorf("share of an unshared lease: %+v", s)
			}
		}),
	},
	{
		name: "UpdateLeaseShare (share --user, --org)", method: "PUT", path: leaseCallPath("/share"),
		body: func(*compatFixture) any {
			return CoordinatorShare{Users: map[string]CoordinatorShareRole{"Bob": "use", "carol": "manage"}, Org: "use"}
		},
		reply: shareReply(func(t *testing.T, _ *compatFixture, s CoordinatorShare) {
			want := map[string]CoordinatorShareRole{"bob": "use", "carol": "manage"}
			if !cmp.Equal(want, s.Users) || s.Org != "use" || s.UpdatedBy != "alice" || s.UpdatedAt == "" {
				t.Errorf("updated share: %+v", s)
			}
		}),
	},
	{
		name: "LeaseShare (shared)", method: "GET", path: leaseCallPath("/share"),
		setup: shareWithBob,
		reply: shareReply(func(t *testing.T, _ *compatFixture, s CoordinatorShare) {
			if s.Users["bob"] != "use" || s.Org != "manage" {
				t.Errorf("share: %+v", s)
			}
		}),
	},
	{
		name: "DeleteLeaseShare (unshare --user)", method: "DELETE", path: leaseCallPath("/share"),
		setup: shareWithBob,
		body:  func(*compatFixture) any { return map[string]any{"user": "bob"} },
		reply: shareReply(func(t *testing.T, _ *compatFixture, s CoordinatorShare) {
			if len(s.Users) != 0 || s.Org != "manage" {
				t.Errorf("share after removing bob: %+v", s)
			}
		}),
	},
	{
		name: "DeleteLeaseShare (unshare --org)", method: "DELETE", path: leaseCallPath("/share"),
		setup: shareWithBob,
		body:  func(*compatFixture) any { return map[string]any{"org": true} },
		reply: shareReply(func(t *testing.T, _ *compatFixture, s CoordinatorShare) {
			if s.Users["bob"] != "use" || s.Org != "" {
				t.Errorf("share after removing the org: %+v", s)
			}
		}),
	},
	{
		name: "DeleteLeaseShare (unshare --all)", method: "DELETE", path: leaseCallPath("/share"),
		setup: shareWithBob,
		body:  func(*compatFixture) any { return map[string]any{} },
		reply: shareReply(func(t *testing.T, _ *compatFixture, s CoordinatorShare) {
			if len(s.Users) != 0 || s.Org != "" || s.UpdatedAt != "" {
				t.Errorf("share after clearing: %+v", s)
			}
		}),
	},
	{
		name: "ReleaseLease", method: "POST", path: leaseCallPath("/release"),
		body: func(*compatFixture) any { return map[string]any{"delete": true} },
		reply: leaseReply(func(t *testing.T, _ *compatFixture, l CoordinatorLease) {
			if l.State != "released" || l.ReleaseDeletesServer == nil || !*l.ReleaseDeletesServer {
				t.Errorf("released lease: state %s, releaseDeletesServer %v", l.State, l.ReleaseDeletesServer)
			}
		}),
	},
	{
		name: "ReleaseLeaseForProvider keeping the server", method: "POST", path: leaseCallPath("/release"),
		body: func(*compatFixture) any { return map[string]any{"delete": false, "expectedProvider": upProvider} },
		reply: leaseReply(func(t *testing.T, _ *compatFixture, l CoordinatorLease) {
			if l.State != "released" || l.ReleaseDeletesServer == nil || *l.ReleaseDeletesServer {
				t.Errorf("kept lease: state %s, releaseDeletesServer %v", l.State, l.ReleaseDeletesServer)
			}
		}),
	},
	{
		name: "CancelLeaseCreate of a created lease", method: "POST", path: leaseCallPath("/cancel-create"),
		body: func(f *compatFixture) any { return map[string]any{"createAttemptID": f.attempt} },
		reply: decodes[CoordinatorCanceledCreateResult](func(t *testing.T, f *compatFixture, got CoordinatorCanceledCreateResult) {
			want := CoordinatorCanceledCreateAttestation{Version: 1, RequestedLeaseID: f.lease.ID, CreateAttemptID: f.attempt, State: "canceled"}
			if diff := cmp.Diff(want, got.CanceledCreate); diff != "" {
				t.Errorf("canceledCreate (-want +got):\n%s", diff)
			}
			if got.Lease == nil || got.Lease.State != "released" {
				t.Fatalf("cancel of a created lease: lease %+v, want it released", got.Lease)
			}
			wantImage(t, *got.Lease)
		}),
	},
	{
		name: "CancelLeaseCreate before the create arrived", method: "POST", path: fixedPath("/v1/leases/cbx_00000000dead/cancel-create"),
		body: func(*compatFixture) any {
			return map[string]any{"createAttemptID": "cat_0000000000000000000000000000dead"}
		},
		reply: decodes[CoordinatorCanceledCreateResult](func(t *testing.T, _ *compatFixture, got CoordinatorCanceledCreateResult) {
			if got.CanceledCreate.State != "canceled" || got.CanceledCreate.RequestedLeaseID != "cbx_00000000dead" || got.Lease != nil {
				t.Errorf("tombstone answer %+v", got)
			}
		}),
	},
	{
		name: "RegisterLease", method: "PUT", path: fixedPath("/v1/leases/static-host-1/registration"),
		body: func(*compatFixture) any {
			return CoordinatorLeaseRegistration{
				Slug: "static-host-1", Provider: "ssh", TargetOS: "linux", WindowsMode: "normal", DesktopEnv: "xfce",
				CloudID: "static-host-1", ServerName: "static-host-1", Host: "10.0.0.5", SSHUser: "crabbox", SSHPort: "22",
				WorkRoot: "/work/crabbox", Profile: "default", Class: upClass, TTLSeconds: 5400, IdleTimeoutSeconds: 1800,
			}
		},
		reply: decodes[CoordinatorLeaseResponse](func(t *testing.T, _ *compatFixture, got CoordinatorLeaseResponse) {
			if l := got.Lease; l.ID != "static-host-1" || l.Lifecycle != "registered" || l.Host != "10.0.0.5" || l.Image != nil {
				t.Errorf("registered lease %+v", l)
			}
		}),
	},
	{
		name: "CreateRun", method: "POST", path: fixedPath("/v1/runs"),
		body: func(f *compatFixture) any { return upstreamRunBody(f.lease.ID) },
		reply: decodes[CoordinatorRunResponse](func(t *testing.T, f *compatFixture, got CoordinatorRunResponse) {
			if r := got.Run; r.ID == "" || r.LeaseID != f.lease.ID || r.State != "running" || r.Label != "ci" {
				t.Errorf("created run %+v", r)
			}
		}),
	},
	{
		name: "Runs (history --lease)", method: "GET",
		path: func(f *compatFixture) string { return "/v1/runs?leaseID=" + f.lease.ID + "&limit=50" },
		reply: decodes[CoordinatorRunsResponse](func(t *testing.T, f *compatFixture, got CoordinatorRunsResponse) {
			if len(got.Runs) != 1 || got.Runs[0].ID != f.run.ID {
				t.Errorf("runs %+v, want %s", got.Runs, f.run.ID)
			}
		}),
	},
	{
		name: "Run", method: "GET", path: runCallPath(""),
		reply: decodes[CoordinatorRunResponse](func(t *testing.T, f *compatFixture, got CoordinatorRunResponse) {
			if got.Run.ID != f.run.ID || got.Run.StartedAt == "" {
				t.Errorf("run %+v", got.Run)
			}
		}),
	},
	{
		name: "AppendRunEvent (lease.created)", method: "POST", path: runCallPath("/events"),
		body: func(f *compatFixture) any {
			return CoordinatorRunEventInput{
				Type: "lease.created", Phase: "leasing", Message: "leased " + f.lease.ID, Data: `{"leaseID":"` + f.lease.ID + `"}`,
				LeaseID: f.lease.ID, Slug: f.lease.Slug, Provider: upProvider, TargetOS: "linux", WindowsMode: "normal",
				Class: upClass, ServerType: upServerType,
			}
		},
		reply: decodes[CoordinatorRunEventResponse](func(t *testing.T, f *compatFixture, got CoordinatorRunEventResponse) {
			if got.Event.RunID != f.run.ID || got.Event.Seq != 2 || got.Event.Type != "lease.created" || got.Event.CreatedAt == "" {
				t.Errorf("event %+v", got.Event)
			}
		}),
	},
	{
		name: "AppendRunEvent (output)", method: "POST", path: runCallPath("/events"),
		body: func(*compatFixture) any {
			return CoordinatorRunEventInput{Type: "output", Phase: "command", Stream: "stdout", Data: "ok\n"}
		},
		reply: decodes[CoordinatorRunEventResponse](func(t *testing.T, _ *compatFixture, got CoordinatorRunEventResponse) {
			if got.Event.Stream != "stdout" || got.Event.Data != "ok\n" {
				t.Errorf("event %+v", got.Event)
			}
		}),
	},
	{
		name: "AppendRunEvent (run.failed)", method: "POST", path: runCallPath("/events"),
		body: func(*compatFixture) any {
			code := 23
			return CoordinatorRunEventInput{Type: "run.failed", Phase: "sync", Message: "sync failed", ExitCode: &code}
		},
		reply: decodes[CoordinatorRunEventResponse](nil),
	},
	{
		name: "RunEvents", method: "GET", path: runCallPath("/events?after=0&limit=100"),
		reply: decodes[CoordinatorRunEventsResponse](func(t *testing.T, f *compatFixture, got CoordinatorRunEventsResponse) {
			if len(got.Events) != 1 || got.Events[0].Type != "phase" || got.Events[0].RunID != f.run.ID {
				t.Errorf("events %+v", got.Events)
			}
		}),
	},
	{
		name: "RunEvents (next page)", method: "GET", path: runCallPath("/events?after=1&limit=100"),
		reply: decodes[CoordinatorRunEventsResponse](func(t *testing.T, _ *compatFixture, got CoordinatorRunEventsResponse) {
			if len(got.Events) != 0 {
				t.Errorf("events after the last %+v", got.Events)
			}
		}),
	},
	{
		name: "FinishRun", method: "POST", path: runCallPath("/finish"),
		body: func(*compatFixture) any { return upstreamFinishBody(1, "FAIL TestX\n") },
		reply: decodes[CoordinatorRunResponse](func(t *testing.T, _ *compatFixture, got CoordinatorRunResponse) {
			r := got.Run
			if r.State != "failed" || r.ExitCode == nil || *r.ExitCode != 1 || r.Results == nil || r.Results.Tests != 3 || r.Results.Failures != 1 {
				t.Errorf("finished run %+v", r)
			}
		}),
	},
	{
		name: "RunLogs", method: "GET", path: runCallPath("/logs"),
		setup: finishRun(bigLog),
		reply: text(func(t *testing.T, _ *compatFixture, body string) {
			if body != bigLog {
				t.Errorf("log of %d bytes starting %.20q, want the %d bytes upstream sent in logChunks", len(body), body, len(bigLog))
			}
		}),
	},
	{
		name: "AppendRunTelemetry", method: "POST", path: runCallPath("/telemetry"),
		body:  func(*compatFixture) any { return map[string]any{"telemetry": upstreamSample()} },
		reply: decodes[CoordinatorRunResponse](nil),
	},
	{
		name: "Run after telemetry", method: "GET", path: runCallPath(""),
		setup: func(t *testing.T, f *compatFixture) {
			f.call(t, "POST", runCallPath("/telemetry")(f), f.alice, map[string]any{"telemetry": upstreamSample()}, decodes[map[string]any](nil))
		},
		reply: decodes[CoordinatorRunResponse](nil),
	},
	{
		name: "Usage", method: "GET", path: fixedPath("/v1/usage?scope=user"),
		reply: decodes[CoordinatorUsageResponse](func(t *testing.T, _ *compatFixture, got CoordinatorUsageResponse) {
			if got.Usage.Scope != "user" || got.Usage.Month == "" || got.Usage.Leases != 1 || got.Usage.ActiveLeases != 1 {
				t.Errorf("usage %+v", got.Usage)
			}
		}),
	},
	{
		name: "Usage (admin, all, month)", method: "GET", path: fixedPath("/v1/usage?month=2026-05&scope=all"), admin: true,
		reply: decodes[CoordinatorUsageResponse](func(t *testing.T, _ *compatFixture, got CoordinatorUsageResponse) {
			if got.Usage.Month != "2026-05" || len(got.Usage.ByOwner) != 1 {
				t.Errorf("usage %+v", got.Usage)
			}
		}),
	},
	{
		name: "AdminLeases", method: "GET", path: fixedPath("/v1/admin/leases?limit=1000"), admin: true,
		setup: func(t *testing.T, f *compatFixture) {
			// An ended lease with an image: admin leases lists every state.
			body := upstreamLeaseBody("cbx_0000000000ee", "ended-crab", "cat_000000000000000000000000000000ee")
			f.call(t, "POST", "/v1/leases", f.alice, body, decodes[CoordinatorLeaseResponse](nil))
			f.call(t, "POST", "/v1/leases/cbx_0000000000ee/release", f.alice, map[string]any{"delete": true}, decodes[CoordinatorLeaseResponse](nil))
		},
		reply: decodes[CoordinatorLeasesResponse](func(t *testing.T, _ *compatFixture, got CoordinatorLeasesResponse) {
			if len(got.Leases) != 2 {
				t.Fatalf("admin leases %+v, want 2", got.Leases)
			}
			for _, l := range got.Leases {
				wantImage(t, l)
			}
		}),
	},
	{
		name: "AdminLeases (active, as list --all does)", method: "GET", path: fixedPath("/v1/admin/leases?limit=1000&state=active"), admin: true,
		reply: decodes[CoordinatorLeasesResponse](func(t *testing.T, f *compatFixture, got CoordinatorLeasesResponse) {
			if len(got.Leases) != 1 || got.Leases[0].ID != f.lease.ID {
				t.Errorf("active admin leases %+v", got.Leases)
			}
		}),
	},
	{
		name: "AdminReleaseLease", method: "POST", path: func(f *compatFixture) string { return "/v1/admin/leases/" + f.lease.ID + "/release" },
		admin: true,
		body:  func(*compatFixture) any { return map[string]any{"delete": true} },
		reply: leaseReply(func(t *testing.T, _ *compatFixture, l CoordinatorLease) {
			if l.State != "released" {
				t.Errorf("admin release: state %s", l.State)
			}
		}),
	},
	{
		name: "Pool", method: "GET", path: fixedPath("/v1/pool?provider=" + upProvider), admin: true,
		reply: decodes[CoordinatorPoolResponse](func(t *testing.T, f *compatFixture, got CoordinatorPoolResponse) {
			if len(got.Machines) != 1 {
				t.Fatalf("machines %+v, want the fixture's lease", got.Machines)
			}
			m := got.Machines[0]
			if string(m.ID) != f.lease.CloudID || m.CloudID != f.lease.CloudID || m.Provider != upProvider ||
				m.Status != "active" || m.Host != f.lease.Host || m.Labels["lease"] != f.lease.ID {
				t.Errorf("machine %+v for lease %+v", m, f.lease)
			}
		}),
	},
	{
		name: "Pool (another provider)", method: "GET", path: fixedPath("/v1/pool?provider=aws"), admin: true,
		reply: decodes[CoordinatorPoolResponse](func(t *testing.T, _ *compatFixture, got CoordinatorPoolResponse) {
			if got.Machines == nil || len(got.Machines) != 0 {
				t.Errorf("machines %+v, want an empty list", got.Machines)
			}
		}),
	},
}

// call sends one upstream request and reads the answer as upstream does.
func (f *compatFixture) call(t *testing.T, method, path, token string, body any, reply upstreamReply) {
	t.Helper()
	status, raw := f.e.call(method, path, token, body)
	if status < 200 || status > 299 {
		t.Fatalf("%s %s: upstream fails on status %d: %s", method, path, status, raw)
	}
	reply.read(t, f, raw)
}

// newCompatFixture makes the lease and the run through upstream's calls.
func newCompatFixture(t *testing.T, open opener) *compatFixture {
	publicKey(t)
	f := &compatFixture{e: simple(t, open), attempt: "cat_00000000000000000000000000000001"}
	f.alice = f.e.token("alice", "acme")
	f.call(t, "POST", "/v1/leases", f.alice, upstreamLeaseBody("cbx_000000000001", "tidal-lobster", f.attempt),
		decodes[CoordinatorLeaseResponse](func(_ *testing.T, f *compatFixture, got CoordinatorLeaseResponse) { f.lease = got.Lease }))
	f.call(t, "POST", "/v1/runs", f.alice, upstreamRunBody(f.lease.ID),
		decodes[CoordinatorRunResponse](func(_ *testing.T, f *compatFixture, got CoordinatorRunResponse) { f.run = got.Run }))
	f.call(t, "POST", "/v1/runs/"+f.run.ID+"/events", f.alice, CoordinatorRunEventInput{Type: "phase", Phase: "sync", Message: "syncing"},
		decodes[CoordinatorRunEventResponse](nil))
	return f
}

// TestUpstreamClientCalls replays every upstream client call this
// coordinator serves and decodes each answer with upstream's types.
func TestUpstreamClientCalls(t *testing.T) {
	for _, c := range upstreamCalls {
		t.Run(c.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, open opener) {
				f := newCompatFixture(t, open)
				if c.setup != nil {
					c.setup(t, f)
				}
				token := f.alice
				if c.admin {
					token = adminToken
				}
				var body any
				if c.body != nil {
					body = c.body(f)
				}
				f.call(t, c.method, c.path(f), token, body, c.reply)
			})
		})
	}
}

// TestUpstreamTypesAreStrict: the transcribed types refuse what upstream
// refuses, so the suite can fail: a lease image as a string (what this
// coordinator used to answer) and a machine ID that is not a string or an
// integer.
func TestUpstreamTypesAreStrict(t *testing.T) {
	for _, c := range []struct {
		body string
		into any
	}{
		{`{"lease":{"id":"cbx_000000000001","image":"ubuntu-24.04"}}`, new(CoordinatorLeaseResponse)},
		{`{"leases":[{"id":"cbx_000000000001","image":"ubuntu-24.04"}]}`, new(CoordinatorLeasesResponse)},
		{`{"machines":[{"id":{"cloud":"x"}}]}`, new(CoordinatorPoolResponse)},
		{`{"run":{"id":"run_0123456789ab","telemetry":5}}`, new(CoordinatorRunResponse)},
	} {
		if err := json.NewDecoder(strings.NewReader(c.body)).Decode(c.into); err == nil {
			t.Errorf("%s decoded into %T; upstream fails on it", c.body, c.into)
		}
	}
	var pool CoordinatorPoolResponse
	if err := json.Unmarshal([]byte(`{"machines":[{"id":42},{"id":"vm-1"}]}`), &pool); err != nil || pool.Machines[0].ID != "42" || pool.Machines[1].ID != "vm-1" {
		t.Errorf("machine IDs: %+v, %v", pool, err)
	}
}

// TestCancelCreateOfAnotherOwnersLease: cancel-create of a lease the
// caller cannot see is 404 and changes nothing; the caller's attempt is
// not tombstoned either.
func TestCancelCreateOfAnotherOwnersLease(t *testing.T) {
	eachStore(t, func(t *testing.T, open opener) {
		f := newCompatFixture(t, open)
		bob := f.e.token("bob", "acme")
		path := "/v1/leases/" + f.lease.ID + "/cancel-create"
		for _, attempt := range []string{f.attempt, "cat_000000000000000000000000000000b0"} {
			f.e.fail("POST", path, bob, map[string]any{"createAttemptID": attempt}, http.StatusNotFound, "not_found")
		}
		if got := f.e.get(f.alice, f.lease.ID); got.State != "active" {
			t.Errorf("alice's lease is %s after bob's cancel, want active", got.State)
		}
		// bob's attempt was not tombstoned: he can still create with it.
		f.call(t, "POST", "/v1/leases", bob, upstreamLeaseBody("cbx_0000000000b0", "bob-crab", "cat_000000000000000000000000000000b0"),
			leaseReply(nil))
	})
}
