package aws_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/crabbox-dev/crabbox/lease"
	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/aws"
	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
)

// isolateSDK points the AWS SDK's shared files at an empty directory and
// turns off the instance metadata service, so the credential chain sees
// only the environment this test sets.
func isolateSDK(t *testing.T) {
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE":                        filepath.Join(dir, "config"),
		"AWS_SHARED_CREDENTIALS_FILE":            filepath.Join(dir, "credentials"),
		"AWS_EC2_METADATA_DISABLED":              "true",
		"AWS_PROFILE":                            "",
		"AWS_ACCESS_KEY_ID":                      "",
		"AWS_SECRET_ACCESS_KEY":                  "",
		"AWS_SESSION_TOKEN":                      "",
		"AWS_WEB_IDENTITY_TOKEN_FILE":            "",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI":     "",
	} {
		t.Setenv(k, v)
	}
}

// TestCredentialsFromEnvironmentNeverLeak acquires and releases with
// credentials from the SDK's standard chain (the environment), and checks
// that the secret appears nowhere: not in requests, logs, targets, errors
// or the lease store.
func TestCredentialsFromEnvironmentNeverLeak(t *testing.T) {
	isolateSDK(t)
	const envKey = "AKIAENVIRONMENT00001"
	t.Setenv("AWS_ACCESS_KEY_ID", envKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", fakeSecret)
	w := newWorld(t)
	b := w.backend(t, func(c *aws.Config) { c.Credentials = nil })
	store, err := lease.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := store.Acquire(ctx, b, lease.Terms{})
	if err != nil {
		t.Fatal(err)
	}
	w.ec2.Inject(fakeec2.Fault{Action: "DescribeInstances", Code: "UnauthorizedOperation", Message: "not allowed", Times: 1})
	_, failure := b.Resolve(ctx, provider.ResolveRequest{ID: l.Claim.ID})
	if failure == nil {
		t.Fatal("Resolve succeeded despite the fault")
	}
	if !errors.Is(failure, provider.ErrUnauthenticated) {
		t.Errorf("Resolve: %v, want one matching ErrUnauthenticated", failure)
	}

	for _, c := range w.ec2.Calls() {
		if c.AccessKey != envKey {
			t.Errorf("%s signed with access key %q, want the environment's", c.Action, c.AccessKey)
		}
		if strings.Contains(fmt.Sprint(c.Params), fakeSecret) {
			t.Errorf("%s carries the secret", c.Action)
		}
	}
	seen := map[string]string{
		"logs": w.logs.String(), "target": fmt.Sprintf("%+v", l.Target), "error": failure.Error(),
	}
	err = filepath.WalkDir(store.Dir(), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		seen[path] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for where, text := range seen {
		if strings.Contains(text, fakeSecret) {
			t.Errorf("the secret access key appears in %s", where)
		}
	}
	if err := store.Release(ctx, b, l.Claim); err != nil {
		t.Fatal(err)
	}
}

func TestMissingCredentials(t *testing.T) {
	isolateSDK(t)
	w := newWorld(t)
	b := w.backend(t, func(c *aws.Config) { c.Credentials = nil })
	_, err := b.Acquire(context.Background(), request(t))
	if !errors.Is(err, provider.ErrUnauthenticated) {
		t.Errorf("Acquire without credentials: %v, want one matching ErrUnauthenticated", err)
	}
	if calls := w.ec2.Calls(); len(calls) != 0 {
		t.Errorf("unsigned calls reached EC2: %v", calls)
	}
}

func TestUnknownProfile(t *testing.T) {
	isolateSDK(t)
	w := newWorld(t)
	_, err := aws.New(aws.Config{Profile: "no-such-profile", Endpoint: w.url}, w.runtime(t, clockwork.NewRealClock()))
	if err == nil || !strings.Contains(err.Error(), "no-such-profile") {
		t.Errorf("New with an unknown profile: %v, want an error naming it", err)
	}
}

func TestRegionFromSDK(t *testing.T) {
	isolateSDK(t)
	w := newWorld(t)
	t.Setenv("AWS_REGION", "ap-south-1")
	b, err := aws.New(aws.Config{Endpoint: w.url}, w.runtime(t, clockwork.NewRealClock()))
	if err != nil || !slices.Equal(b.Regions(), []string{"ap-south-1"}) {
		t.Errorf("New with AWS_REGION: %v, %v; want region ap-south-1", b, err)
	}
	t.Setenv("AWS_REGION", "")
	if b, err = aws.New(aws.Config{Endpoint: w.url}, w.runtime(t, clockwork.NewRealClock())); err != nil || !slices.Equal(b.Regions(), []string{aws.DefaultRegion}) {
		t.Errorf("New without a region: %v, %v; want %s", b, err, aws.DefaultRegion)
	}
	t.Setenv("AWS_REGION", "moon base")
	if _, err := aws.New(aws.Config{Endpoint: w.url}, w.runtime(t, clockwork.NewRealClock())); err == nil || !strings.Contains(err.Error(), "moon base") {
		t.Errorf("New with a bad AWS_REGION: %v, want an error naming it", err)
	}
}
