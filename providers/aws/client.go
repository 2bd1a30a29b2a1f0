package aws

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/crabbox-dev/crabbox/provider"
)

// loadSDKConfig reads the AWS SDK's configuration: region, profile and the
// standard credential chain (which it does not resolve yet: no network).
// httpClient, when not nil, replaces the SDK's own HTTP client (which
// honours AWS_CA_BUNDLE) for EC2 calls.
func loadSDKConfig(ctx context.Context, c Config, httpClient *http.Client, log *slog.Logger) (awssdk.Config, error) {
	opts := []func(*config.LoadOptions) error{config.WithLogger(sdkLogger{log})}
	if c.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(c.Profile))
	}
	if c.Credentials != nil {
		opts = append(opts, config.WithCredentialsProvider(c.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return awssdk.Config{}, fmt.Errorf("aws provider: load AWS SDK configuration (profile %q): %w", c.Profile, err)
	}
	if httpClient != nil {
		cfg.HTTPClient = httpClient
	}
	return cfg, nil
}

// sdkLogger sends the SDK's log lines to the runtime's logger instead of
// standard error.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	l.log.Log(context.Background(), level, "aws sdk: "+fmt.Sprintf(format, v...))
}

// authenticate resolves the credentials (from the SDK's cache after the
// first time), so that missing or broken credentials are one clear error
// matching provider.ErrUnauthenticated before any request.
func (b *Backend) authenticate(ctx context.Context) error {
	if b.sdk.Credentials == nil {
		return fmt.Errorf("aws: no credentials provider: %w", provider.ErrUnauthenticated)
	}
	if _, err := b.sdk.Credentials.Retrieve(ctx); err != nil {
		where := "the AWS SDK's standard chain"
		if b.cfg.Profile != "" {
			where += fmt.Sprintf(" with profile %q", b.cfg.Profile)
		}
		return fmt.Errorf("aws: no usable credentials from %s: %w: %w", where, provider.ErrUnauthenticated, err)
	}
	return nil
}

// newEC2Clients returns an EC2 client for each region.
func newEC2Clients(sdk awssdk.Config, regions []string, endpoint string) map[string]*ec2.Client {
	clients := make(map[string]*ec2.Client, len(regions))
	for _, region := range regions {
		clients[region] = ec2.NewFromConfig(sdk, func(o *ec2.Options) {
			o.Region = region
			if endpoint != "" {
				o.BaseEndpoint = awssdk.String(endpoint)
			}
		})
	}
	return clients
}

// ec2Client returns the EC2 client of one of the configured regions.
func (b *Backend) ec2Client(region string) *ec2.Client { return b.clients[region] }

// EC2 error codes that mean "no capacity for this request": for spot, the
// reason to fall back to on-demand.
var capacityCodes = map[string]bool{
	"InsufficientInstanceCapacity":         true,
	"InsufficientHostCapacity":             true,
	"InsufficientReservedInstanceCapacity": true,
	"InsufficientCapacity":                 true,
	"SpotMaxPriceTooLow":                   true,
	"MaxSpotInstanceCountExceeded":         true,
	"InstanceLimitExceeded":                true,
	"VcpuLimitExceeded":                    true,
}

var authCodes = map[string]bool{
	"AuthFailure":                 true,
	"UnauthorizedOperation":       true,
	"InvalidClientTokenId":        true,
	"SignatureDoesNotMatch":       true,
	"ExpiredToken":                true,
	"RequestExpired":              true,
	"OptInRequired":               true,
	"UnrecognizedClientException": true,
}

var transientCodes = map[string]bool{
	"RequestLimitExceeded": true,
	"Throttling":           true,
	"InternalError":        true,
	"InternalFailure":      true,
	"ServiceUnavailable":   true,
	"Unavailable":          true,
}

// apiCode returns the EC2 error code of err, if it is an API error.
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// notFound reports whether err is EC2's answer for a resource that does
// not exist (InvalidInstanceID.NotFound, InvalidGroup.NotFound, ...).
func notFound(err error) bool { return strings.HasSuffix(apiCode(err), ".NotFound") }

// portable wraps an SDK error with the provider's portable error kind, so
// callers can use errors.Is with provider.Err* and errors.As with the SDK's
// types. what says what was being done.
func portable(err error, what string) error {
	if err == nil {
		return nil
	}
	var kind error
	code := apiCode(err)
	var signing *v4.SigningError // no credentials, or unusable ones
	switch {
	case capacityCodes[code]:
		kind = provider.ErrCapacity
	case authCodes[code]:
		kind = provider.ErrUnauthenticated
	case strings.HasSuffix(code, ".NotFound"):
		kind = provider.ErrNotFound
	case strings.HasSuffix(code, ".Duplicate"), code == "DependencyViolation", code == "IdempotentParameterMismatch":
		kind = provider.ErrConflict
	case transientCodes[code]:
		kind = provider.ErrTransient
	case code == "" && errors.As(err, &signing):
		kind = provider.ErrUnauthenticated
	}
	if kind == nil {
		return fmt.Errorf("aws: %s: %w", what, err)
	}
	return fmt.Errorf("aws: %s: %w: %w", what, kind, err)
}
