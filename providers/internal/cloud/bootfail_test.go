package cloud_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud/cloudtest"
)

// TestWaitForSSHBootstrapFailed: a box whose bootstrap failed answers with
// its host key and a banner saying so; WaitForSSH reports the failure at
// the first look, on a clock that never moves, instead of at its timeout.
func TestWaitForSSHBootstrapFailed(t *testing.T) {
	f := cloudtest.NewFleet(t)
	f.FailBootstrap("install tools (exit status 100)", "Reading package lists...\nE: Unable to locate package nope\n")
	ip, b, _ := bootBox(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	port, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
		Host: ip, HostKey: b.HostKey.PublicKey(), Dial: mappedDial(f), Clock: clockwork.NewFakeClock(), Timeout: 10 * time.Minute,
	})
	var be *cloud.BootstrapError
	if !errors.As(err, &be) || !errors.Is(err, cloud.ErrBootstrapFailed) {
		t.Fatalf("WaitForSSH = %d, %v; want a *cloud.BootstrapError", port, err)
	}
	want := &cloud.BootstrapError{Host: ip, Step: "install tools (exit status 100)", Output: "Reading package lists...\nE: Unable to locate package nope"}
	if diff := cmp.Diff(want, be); diff != "" {
		t.Errorf("BootstrapError (-want +got):\n%s", diff)
	}
	if msg := err.Error(); msg != "box "+ip+" bootstrap failed: install tools (exit status 100): its output ends:\nReading package lists...\nE: Unable to locate package nope" {
		t.Errorf("error says %q", msg)
	}
}

// A failure banner from a box with another host key is not believed: the
// wait goes on (and times out) as for any box that is not the one asked for.
func TestWaitForSSHIgnoresBannerOfOtherKey(t *testing.T) {
	f := cloudtest.NewFleet(t)
	f.FailBootstrap("create user (exit status 1)", "")
	ip, _, _ := bootBox(t, f)
	clock := clockwork.NewFakeClock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cloud.WaitForSSH(ctx, cloud.SSHWait{
			Host: ip, HostKey: newHostKey(t).PublicKey(), Dial: mappedDial(f), Clock: clock,
			Interval: 30 * time.Second, Timeout: 30 * time.Second,
		})
		done <- err
	}()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	err := <-done
	var be *cloud.BootstrapError
	if err == nil || errors.As(err, &be) || !strings.Contains(err.Error(), "did not answer SSH") {
		t.Errorf("WaitForSSH err = %v; want the timeout, not a bootstrap failure", err)
	}
}

func TestParseBootstrapFailure(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name, banner string
		want         cloud.BootstrapError
		ok           bool
	}{
		{"not a failure", "Welcome to the box\n", cloud.BootstrapError{}, false},
		{"empty", "", cloud.BootstrapError{}, false},
		{"prefix not first", "hello\ncrabbox-bootstrap-failed: x\n", cloud.BootstrapError{}, false},
		{"step only", "crabbox-bootstrap-failed: start sshd (exit status 1)\n", cloud.BootstrapError{Step: "start sshd (exit status 1)"}, true},
		{"crlf", "crabbox-bootstrap-failed: create user\r\nuseradd: failure\r\n", cloud.BootstrapError{Step: "create user", Output: "useradd: failure"}, true},
		{"no step", "crabbox-bootstrap-failed: \n", cloud.BootstrapError{Step: "unknown step"}, true},
		{"control characters", "crabbox-bootstrap-failed: a\x1b[31mb\x00\nout\x07put\tx\n", cloud.BootstrapError{Step: "a[31mb", Output: "output x"}, true},
		{"long step", "crabbox-bootstrap-failed: " + long, cloud.BootstrapError{Step: long[:200] + "..."}, true},
		{"last ten lines", "crabbox-bootstrap-failed: s\n1\n2\n\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n",
			cloud.BootstrapError{Step: "s", Output: "3\n4\n5\n6\n7\n8\n9\n10\n11\n12"}, true},
		{"long lines", "crabbox-bootstrap-failed: s\n" + strings.Repeat(long+"\n", 4),
			cloud.BootstrapError{Step: "s", Output: long + "\n" + long + "\n" + long}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := cloud.ParseBootstrapFailure(tt.banner)
			if ok != tt.ok {
				t.Fatalf("ok = %v, want %v", ok, tt.ok)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseBootstrapFailure (-want +got):\n%s", diff)
			}
		})
	}
	// What the fakes serve reads back.
	banner := cloud.BootstrapFailureBanner("configure sshd (exit status 255)", "line\n")
	if got, ok := cloud.ParseBootstrapFailure(banner); !ok || got.Step != "configure sshd (exit status 255)" || got.Output != "line" {
		t.Errorf("ParseBootstrapFailure(BootstrapFailureBanner(...)) = %+v, %v", got, ok)
	}
}

// FuzzParseBootstrapFailure: a banner comes from the box, so whatever it
// says, what is kept is bounded and printable.
func FuzzParseBootstrapFailure(f *testing.F) {
	f.Add("crabbox-bootstrap-failed: install tools (exit status 100)\nE: nope\n")
	f.Add("crabbox-bootstrap-failed: \r\n\x00\xff\n")
	f.Add("Welcome\n")
	f.Fuzz(func(t *testing.T, banner string) {
		e, ok := cloud.ParseBootstrapFailure(banner)
		if !ok {
			if e != (cloud.BootstrapError{}) {
				t.Errorf("not a failure, yet %+v", e)
			}
			return
		}
		if e.Step == "" || len(e.Step) > 203 || len(e.Output) > 1000 || strings.Count(e.Output, "\n") >= 10 {
			t.Errorf("unbounded: step %d bytes, output %d bytes, %d lines", len(e.Step), len(e.Output), strings.Count(e.Output, "\n")+1)
		}
		for _, r := range e.Step + e.Output {
			if (r < 0x20 || r >= 0x7f) && r != '\n' {
				t.Fatalf("unprintable %q kept in %+v", r, e)
			}
		}
	})
}
