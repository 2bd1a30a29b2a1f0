package aws_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// The state-changing calls of an acquire, in order.
const (
	importKey   = "ImportKeyPair"
	createGroup = "CreateSecurityGroup"
	openPorts   = "AuthorizeSecurityGroupIngress"
	run         = "RunInstances"
	tagReady    = "CreateTags"
	terminate   = "TerminateInstances"
	deleteGroup = "DeleteSecurityGroup"
	deleteKey   = "DeleteKeyPair"
)

// describesInstance matches the wait for an instance's address (by ID),
// not the rollback's search by tags.
func describesInstance(c fakeec2.Call) bool { return c.Params.Get("InstanceId.1") != "" }

// TestAcquireRollback makes every step of an acquire fail or hang, before
// or after the cloud did the work, and checks that every resource created
// so far is deleted, newest first: instance, then security group, then key
// pair.
func TestAcquireRollback(t *testing.T) {
	type setup func(t *testing.T, w *world, cancel func()) []func(*aws.Config)
	fault := func(f fakeec2.Fault) setup {
		return func(t *testing.T, w *world, cancel func()) []func(*aws.Config) {
			if f.Hang {
				f.OnHang = cancel
			}
			w.ec2.Inject(f)
			return nil
		}
	}
	cases := []struct {
		name  string
		setup setup
		step  cloud.Step // the step the error names; "" when the context ended
		want  []string
	}{
		{"key/fails", fault(fakeec2.Fault{Action: importKey, Code: "InvalidKey.Format"}), cloud.StepKey,
			[]string{importKey}},
		{"key/answer lost", fault(fakeec2.Fault{Action: importKey, After: true}), cloud.StepKey,
			[]string{importKey, deleteKey}},
		{"key/hangs", fault(fakeec2.Fault{Action: importKey, Hang: true}), "",
			[]string{importKey}},
		{"key/hangs after import", fault(fakeec2.Fault{Action: importKey, Hang: true, After: true}), "",
			[]string{importKey, deleteKey}},

		{"security group/create fails", fault(fakeec2.Fault{Action: createGroup, Code: "UnauthorizedOperation"}), "security-group",
			[]string{importKey, createGroup, deleteKey}},
		{"security group/answer lost", fault(fakeec2.Fault{Action: createGroup, After: true}), "security-group",
			[]string{importKey, createGroup, deleteGroup, deleteKey}},
		{"security group/opening ports fails", fault(fakeec2.Fault{Action: openPorts, Code: "RulesPerSecurityGroupLimitExceeded"}), "security-group",
			[]string{importKey, createGroup, openPorts, deleteGroup, deleteKey}},
		{"security group/hangs after create", fault(fakeec2.Fault{Action: createGroup, Hang: true, After: true}), "",
			[]string{importKey, createGroup, deleteGroup, deleteKey}},

		{"create/fails", fault(fakeec2.Fault{Action: run, Code: "InvalidParameterValue"}), cloud.StepCreate,
			[]string{importKey, createGroup, openPorts, run, deleteGroup, deleteKey}},
		{"create/no capacity at all", fault(fakeec2.Fault{Action: run, Code: "InsufficientInstanceCapacity"}), cloud.StepCreate,
			[]string{importKey, createGroup, openPorts, run, run, deleteGroup, deleteKey}},
		{"create/answer lost", fault(fakeec2.Fault{Action: run, After: true, Code: "InvalidParameterValue"}), cloud.StepCreate,
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},
		{"create/hangs", fault(fakeec2.Fault{Action: run, Hang: true}), "",
			[]string{importKey, createGroup, openPorts, run, deleteGroup, deleteKey}},
		{"create/hangs after create", fault(fakeec2.Fault{Action: run, Hang: true, After: true}), "",
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},

		{"address/fails", fault(fakeec2.Fault{Action: "DescribeInstances", Match: describesInstance, Code: "UnauthorizedOperation"}), cloud.StepAddress,
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},
		{"address/hangs", fault(fakeec2.Fault{Action: "DescribeInstances", Match: describesInstance, Hang: true}), "",
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},
		{"address/never comes", func(t *testing.T, w *world, cancel func()) []func(*aws.Config) {
			w.ec2.SetPendingDescribes(1 << 30)
			return []func(*aws.Config){func(c *aws.Config) { c.BootTimeout = time.Nanosecond }}
		}, cloud.StepAddress,
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},

		{"ssh/never answers", func(t *testing.T, w *world, cancel func()) []func(*aws.Config) {
			w.ec2.SetHooks(fakeec2.Hooks{Launch: func(fakeec2.Instance) (string, error) { return w.fleet.NewAddress(), nil }})
			return []func(*aws.Config){func(c *aws.Config) { c.BootTimeout = time.Nanosecond }}
		}, cloud.StepSSH,
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},
		{"ssh/bootstrap fails", func(t *testing.T, w *world, cancel func()) []func(*aws.Config) {
			// The boot timeout stays long: the failure is reported without it.
			w.fleet.FailBootstrap("install tools (exit status 100)", "E: nope\n")
			return nil
		}, cloud.StepSSH,
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},
		{"ssh/hangs", func(t *testing.T, w *world, cancel func()) []func(*aws.Config) {
			addr := silentListener(t, cancel)
			return []func(*aws.Config){func(c *aws.Config) {
				c.MapAddress = func(string, int) (string, int) { return addr.IP.String(), addr.Port }
			}}
		}, "",
			[]string{importKey, createGroup, openPorts, run, terminate, deleteGroup, deleteKey}},

		{"label/fails", fault(fakeec2.Fault{Action: tagReady, Code: "UnauthorizedOperation"}), cloud.StepLabel,
			[]string{importKey, createGroup, openPorts, run, tagReady, terminate, deleteGroup, deleteKey}},
		{"label/hangs", fault(fakeec2.Fault{Action: tagReady, Hang: true}), "",
			[]string{importKey, createGroup, openPorts, run, tagReady, terminate, deleteGroup, deleteKey}},
		{"label/hangs after tagging", fault(fakeec2.Fault{Action: tagReady, Hang: true, After: true}), "",
			[]string{importKey, createGroup, openPorts, run, tagReady, terminate, deleteGroup, deleteKey}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b := w.backend(t, tc.setup(t, w, cancel)...)
			_, err := b.Acquire(ctx, request(t))
			if err == nil {
				t.Fatal("Acquire succeeded despite the fault")
			}
			if tc.step == "" {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("Acquire error = %v, want one matching context.Canceled", err)
				}
			} else if step, ok := cloud.FailedStep(err); !ok || step != tc.step {
				t.Errorf("Acquire error names step %q (%v), want %q: %v", step, ok, tc.step, err)
			}
			if diff := cmp.Diff(tc.want, w.actions()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			w.checkNothingLeft(t)
		})
	}
}

// silentListener accepts SSH connections and never answers, as a box
// whose sshd hangs; it calls onAccept with the first connection.
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

// TestRollbackKeepsAnExistingGroup: a security group an earlier acquire
// created is shared; a failed acquire that did not create it leaves it.
func TestRollbackKeepsAnExistingGroup(t *testing.T) {
	w := newWorld(t)
	b := w.backend(t)
	ctx := context.Background()
	first, err := b.Acquire(ctx, request(t))
	if err != nil {
		t.Fatal(err)
	}
	w.ec2.Inject(fakeec2.Fault{Action: run, Code: "InvalidParameterValue"})
	if _, err := b.Acquire(ctx, request(t)); err == nil {
		t.Fatal("second Acquire succeeded despite the fault")
	}
	if got := len(w.ec2.SecurityGroups(region)); got != 1 {
		t.Errorf("security groups after the failed acquire = %d, want the shared one", got)
	}
	if got := len(w.ec2.KeyPairs(region)); got != 1 {
		t.Errorf("key pairs after the failed acquire = %d, want only the first lease's", got)
	}
	if err := b.ReleaseLease(ctx, releaseOf(first)); err != nil {
		t.Fatal(err)
	}
	if got := w.ec2.Instances(region); len(got) != 0 {
		t.Errorf("instances after release: %+v", got)
	}
}
