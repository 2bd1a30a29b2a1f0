package gcp_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/gcp"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// TestAcquireRollback makes each step of acquire (firewall, create,
// address, ssh, label) fail, hang, or succeed with its answer lost, and
// checks that everything created so far is deleted, the instance before
// the firewall rule, and that the error names the step.
func TestAcquireRollback(t *testing.T) {
	var (
		fw       = []string{"insert firewall", "delete firewall"}
		inst     = []string{"insert firewall", "insert instance", "delete instance", "delete firewall"}
		labelled = []string{"insert firewall", "insert instance", "label instance state=ready", "delete instance", "delete firewall"}
	)
	type setup func(t *testing.T, e *env, cancel func()) []func(*gcp.Config)
	inject := func(op string, ft fault) setup {
		return func(_ *testing.T, e *env, cancel func()) []func(*gcp.Config) {
			if ft.hang {
				ft.onHang = cancel
			}
			e.api.setFault(op, ft)
			return nil
		}
	}
	bootTimeout := func(c *gcp.Config) { c.BootTimeout = time.Nanosecond }
	tests := []struct {
		name    string
		setup   setup
		step    cloud.Step // the step the error names; "" when the context ended
		wantErr error
		want    []string
	}{
		{"firewall/fails", inject(opFirewallInsert, fault{status: 403, reason: "forbidden"}), "firewall", provider.ErrUnauthenticated, nil},
		{"firewall/answer lost", inject(opFirewallInsert, fault{after: true, reason: "backendError"}), "firewall", provider.ErrTransient, fw},
		{"firewall/hangs", inject(opFirewallInsert, fault{hang: true}), "", nil, nil},
		{"firewall/hangs after insert", inject(opFirewallInsert, fault{hang: true, after: true}), "", nil, fw},

		{"create/fails", inject(opInstanceInsert, fault{status: 400, reason: "invalid"}), cloud.StepCreate, provider.ErrPrecondition, fw},
		{"create/no capacity anywhere", func(_ *testing.T, e *env, _ func()) []func(*gcp.Config) {
			for _, z := range zones {
				e.api.capacity[z+"/SPOT"] = "ZONE_RESOURCE_POOL_EXHAUSTED"
				e.api.capacity[z+"/STANDARD"] = "QUOTA_EXCEEDED"
			}
			return nil
		}, cloud.StepCreate, provider.ErrCapacity, fw},
		{"create/answer lost", inject(opInstanceInsert, fault{after: true, reason: "backendError"}), cloud.StepCreate, provider.ErrTransient, inst},
		{"create/hangs", inject(opInstanceInsert, fault{hang: true}), "", nil, fw},
		{"create/hangs after insert", inject(opInstanceInsert, fault{hang: true, after: true}), "", nil, inst},

		{"address/fails", inject(opInstanceGet, fault{status: 403, reason: "forbidden"}), cloud.StepAddress, provider.ErrUnauthenticated, inst},
		{"address/hangs", inject(opInstanceGet, fault{hang: true}), "", nil, inst},
		{"address/never comes", func(_ *testing.T, e *env, _ func()) []func(*gcp.Config) {
			e.api.noAddress = true
			return []func(*gcp.Config){bootTimeout}
		}, cloud.StepAddress, provider.ErrTransient, inst},

		{"ssh/never answers", func(_ *testing.T, e *env, _ func()) []func(*gcp.Config) {
			e.api.noBoot = true
			return []func(*gcp.Config){bootTimeout}
		}, cloud.StepSSH, nil, inst},
		{"ssh/bootstrap fails", func(_ *testing.T, e *env, _ func()) []func(*gcp.Config) {
			e.api.fleet.FailBootstrap("configure sshd (exit status 255)", "sshd: bad configuration\n")
			return nil
		}, cloud.StepSSH, cloud.ErrBootstrapFailed, inst},
		{"ssh/hangs", func(t *testing.T, e *env, cancel func()) []func(*gcp.Config) {
			addr := silentListener(t, cancel)
			return []func(*gcp.Config){func(c *gcp.Config) {
				c.MapAddress = func(string, int) (string, int) { return addr.IP.String(), addr.Port }
			}}
		}, "", nil, inst},

		{"label/fails", inject(opSetLabels, fault{reason: "backendError"}), cloud.StepLabel, provider.ErrTransient, inst},
		{"label/fingerprint changed", inject(opSetLabels, fault{status: 412, reason: "conditionNotMet"}), cloud.StepLabel, provider.ErrConflict, inst},
		{"label/hangs", inject(opSetLabels, fault{hang: true}), "", nil, inst},
		{"label/hangs after labelling", inject(opSetLabels, fault{hang: true, after: true}), "", nil, labelled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b := e.backend(t, tt.setup(t, e, cancel)...)
			req, _ := newRequest(t, time.Now())
			_, err := b.Acquire(ctx, req)
			if err == nil {
				t.Fatal("Acquire succeeded despite the fault")
			}
			if tt.step == "" {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Acquire err = %v, want one matching context.Canceled", err)
				}
			} else if step, ok := cloud.FailedStep(err); !ok || step != tt.step {
				t.Errorf("failed step = %q (%v), want %q; err = %v", step, ok, tt.step, err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want one matching %v", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "roll back") {
				t.Errorf("rollback reported a failure: %v", err)
			}
			if diff := cmp.Diff(tt.want, events(e.api)); diff != "" {
				t.Errorf("API mutations (-want +got):\n%s", diff)
			}
			checkEmpty(t, e.api)
		})
	}
}

// silentListener accepts connections and never answers, as a box whose
// sshd hangs; it calls onAccept with the first connection.
func silentListener(t *testing.T, onAccept func()) *net.TCPAddr {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		var once sync.Once
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			once.Do(onAccept)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr)
}

// TestAcquireRollbackFails: when deleting fails during the rollback, the
// error says so, the instance is labelled failed, and cleanup deletes it
// at once (long before its expiry).
func TestAcquireRollbackFails(t *testing.T) {
	e := newEnv(t)
	e.api.setFault(opSetLabels, fault{reason: "backendError", times: 1})
	e.api.setFault(opInstanceDelete, fault{reason: "backendError", times: 1})
	b := e.backend(t)
	req, _ := newRequest(t, time.Now())
	_, err := b.Acquire(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "roll back instances") || !strings.Contains(err.Error(), "label instance") {
		t.Fatalf("Acquire err = %v, want the label failure and the failed rollback", err)
	}
	left := e.api.instanceList()
	if len(left) != 1 || left[0].GetLabels()["state"] != "failed" {
		t.Fatalf("instances after the failed rollback: %v; want the 1 left for cleanup, labelled failed", left)
	}
	claimed := func(id string) bool { return id == req.LeaseID }
	ds, err := b.Cleanup(context.Background(), provider.CleanupRequest{Now: req.CreatedAt, Claimed: claimed})
	if err != nil || len(ds) != 1 || !ds[0].Deleted || ds[0].Reason != "state failed" {
		t.Fatalf("Cleanup = %+v, %v; want the failed instance deleted", ds, err)
	}
	want := []string{"insert firewall", "insert instance", "label instance state=failed", "delete firewall", "delete instance"}
	if diff := cmp.Diff(want, events(e.api)); diff != "" {
		t.Errorf("API mutations (-want +got):\n%s", diff)
	}
	checkEmpty(t, e.api)
}

// TestRollbackKeepsASharedFirewall: a firewall rule an earlier acquire
// created is shared; a failed acquire leaves it, and so does the rollback
// of an acquire that created it while another lease's instance relies on
// it.
func TestRollbackKeepsASharedFirewall(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t)
	ctx := context.Background()
	req, _ := newRequest(t, time.Now())
	first, err := b.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	e.api.setFault(opInstanceInsert, fault{status: 400, reason: "invalid", times: 1})
	second, _ := newRequest(t, time.Now())
	if _, err := b.Acquire(ctx, second); err == nil {
		t.Fatal("second Acquire succeeded despite the fault")
	}
	if fw := e.api.firewallList(); len(fw) != 1 {
		t.Errorf("firewall rules after the failed acquire = %v, want the shared one", fw)
	}
	if err := b.ReleaseLease(ctx, provider.ReleaseRequest{Lease: first}); err != nil {
		t.Fatal(err)
	}
	if in := e.api.instanceList(); len(in) != 0 {
		t.Errorf("instances after release: %v", in)
	}
	if fw := e.api.firewallList(); len(fw) != 1 {
		t.Errorf("release deleted the shared firewall rule")
	}
}
