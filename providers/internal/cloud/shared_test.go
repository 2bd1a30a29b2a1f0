package cloud_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

func TestList(t *testing.T) {
	for in, want := range map[string][]string{
		"":              nil,
		" , ,":          nil,
		"cx22":          {"cx22"},
		" a , b,,c ,  ": {"a", "b", "c"},
	} {
		if diff := cmp.Diff(want, cloud.List(in)); diff != "" {
			t.Errorf("List(%q) (-want +got):\n%s", in, diff)
		}
	}
}

func TestMissingCredential(t *testing.T) {
	err := cloud.MissingCredential("acme", "ACME_TOKEN", "create a token and export it")
	want := "acme provider: ACME_TOKEN is not set: create a token and export it: " + provider.ErrUnauthenticated.Error()
	if err.Error() != want || !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("MissingCredential = %q (is unauthenticated: %v), want %q", err, errors.Is(err, provider.ErrUnauthenticated), want)
	}
}

func TestParseBootOptions(t *testing.T) {
	prepared, boot, err := cloud.ParseBootOptions("acme", provider.Config{"prepared": "true", "boot-timeout": "3m"})
	if err != nil || !prepared || boot != 3*time.Minute {
		t.Errorf("ParseBootOptions = %v, %v, %v; want true, 3m, nil", prepared, boot, err)
	}
	for _, cfg := range []provider.Config{
		{"prepared": "maybe", "boot-timeout": "3m"},
		{"prepared": "false", "boot-timeout": "soon"},
	} {
		if _, _, err := cloud.ParseBootOptions("acme", cfg); err == nil || !strings.HasPrefix(err.Error(), "acme provider: ") {
			t.Errorf("ParseBootOptions(%v) error = %v, want one naming the provider", cfg, err)
		}
	}
}

func TestTargets(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	target := func(n int) (provider.LeaseTarget, error) {
		if n < 0 {
			return provider.LeaseTarget{}, errors.New("bad labels")
		}
		return provider.LeaseTarget{CloudID: fmt.Sprint(n)}, nil
	}
	got := cloud.Targets(log, []int{1, -2, 3}, target, "acme box with unreadable labels", "box", func(n int) any { return n })
	if diff := cmp.Diff([]provider.LeaseTarget{{CloudID: "1"}, {CloudID: "3"}}, got); diff != "" {
		t.Errorf("Targets (-want +got):\n%s", diff)
	}
	if s := buf.String(); !strings.Contains(s, `msg="acme box with unreadable labels" box=-2 err="bad labels"`) || strings.Count(s, "\n") != 1 {
		t.Errorf("log = %q, want one warning naming box -2", s)
	}
}

func TestCheckTouch(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := cloud.CheckTouch(provider.TouchRequest{Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Errorf("CheckTouch with time and expiry = %v", err)
	}
	for _, req := range []provider.TouchRequest{{Now: now}, {ExpiresAt: now}} {
		if err := cloud.CheckTouch(req); err == nil {
			t.Errorf("CheckTouch(%+v) = nil, want an error", req)
		}
	}
}

func TestBoxDefaults(t *testing.T) {
	var (
		workRoot, owner string
		ports           []int
		boot, poll      time.Duration
		mapAddress      func(string, int) (string, int)
	)
	cloud.BoxDefaults(&workRoot, &owner, &ports, &boot, 7*time.Minute, &poll, &mapAddress)
	if workRoot != cloud.DefaultWorkRoot || owner != cloud.CurrentUser() || boot != 7*time.Minute || poll != 2*time.Second {
		t.Errorf("BoxDefaults = %q, %q, %v, %v; want the defaults", workRoot, owner, boot, poll)
	}
	if diff := cmp.Diff(cloud.DefaultPorts(), ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	if h, p := mapAddress("192.0.2.1", 22); h != "192.0.2.1" || p != 22 {
		t.Errorf("default address map = %s:%d, want 192.0.2.1:22", h, p)
	}

	workRoot, owner, ports, boot, poll = "/w", "me", []int{2222}, time.Minute, time.Second
	mapAddress = func(string, int) (string, int) { return "127.0.0.1", 1 }
	cloud.BoxDefaults(&workRoot, &owner, &ports, &boot, 7*time.Minute, &poll, &mapAddress)
	if workRoot != "/w" || owner != "me" || boot != time.Minute || poll != time.Second || len(ports) != 1 || ports[0] != 2222 {
		t.Errorf("BoxDefaults changed set values: %q, %q, %v, %v, %v", workRoot, owner, ports, boot, poll)
	}
	if h, _ := mapAddress("192.0.2.1", 22); h != "127.0.0.1" {
		t.Errorf("BoxDefaults replaced a set address map")
	}
}

func TestBoxOptions(t *testing.T) {
	want := []provider.Option{
		{Name: "prepared", Flag: "acme-prepared", Default: "false", Bool: true, Help: "the image already has git and tar: install nothing at boot"},
		{Name: "work-root", Flag: "acme-work-root", Default: cloud.DefaultWorkRoot, Help: "work root on the box", Locates: true},
		{Name: "owner", Flag: "acme-owner", Help: "owner tag on boxes (default: the OS user)"},
		{Name: "boot-timeout", Flag: "acme-boot-timeout", Default: "7m0s", Help: "how long to wait for a new box's address and SSH"},
	}
	if diff := cmp.Diff(want, cloud.BoxOptions("acme", "owner tag on boxes", "box", 7*time.Minute)); diff != "" {
		t.Errorf("BoxOptions (-want +got):\n%s", diff)
	}
}

func TestResolveLive(t *testing.T) {
	type box struct {
		id   int
		live bool
	}
	byLease := map[string][]box{"one": {{1, true}, {2, false}}, "none": {{3, false}}, "two": {{4, true}, {5, true}}}
	var asked []string
	find := func(_ context.Context, leaseID, slug string) ([]box, error) {
		asked = append(asked, leaseID+"/"+slug)
		if slug == "broken" {
			return nil, errors.New("api down")
		}
		return byLease[slug], nil
	}
	resolve := func(ref string) (box, error) {
		return cloud.ResolveLive(context.Background(), ref, find, func(b box) bool { return b.live }, "box", func(b box) any { return b.id })
	}
	if b, err := resolve("one"); err != nil || b.id != 1 {
		t.Errorf("resolve(one) = %v, %v; want box 1", b, err)
	}
	if _, err := resolve("none"); !errors.Is(err, provider.ErrNotFound) || err.Error() != "no running box: "+provider.ErrNotFound.Error() {
		t.Errorf("resolve(none) error = %v, want no running box", err)
	}
	if _, err := resolve("two"); !errors.Is(err, provider.ErrConflict) || !strings.HasPrefix(err.Error(), "2 running boxs (4, 5, ...): ") {
		t.Errorf("resolve(two) error = %v, want a conflict naming boxes 4 and 5", err)
	}
	if _, err := resolve("broken"); err == nil || err.Error() != "api down" {
		t.Errorf("resolve(broken) error = %v, want the find error", err)
	}
	asked = nil
	if _, err := resolve("Not A Ref!"); !errors.Is(err, provider.ErrNotFound) || len(asked) != 0 {
		t.Errorf("resolve(bad ref) = %v after asking %v; want ErrNotFound without a lookup", err, asked)
	}
}
