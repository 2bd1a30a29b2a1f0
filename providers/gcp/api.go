package gcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	compute "cloud.google.com/go/compute/apiv1"
	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/googleapi"

	"github.com/crabbox-dev/crabbox/provider"
	"github.com/crabbox-dev/crabbox/providers/internal/cloud"
)

// capacityCodes are the operation error codes (and, lowercased without
// underscores, the error reasons) of a zone or project that cannot take
// the instance now: trying elsewhere, or as standard instead of spot, may
// work.
var capacityCodes = []string{
	"ZONE_RESOURCE_POOL_EXHAUSTED",
	"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS",
	"RESOURCE_POOL_EXHAUSTED",
	"QUOTA_EXCEEDED",
	"REGION_QUOTA_EXCEEDED",
}

func isCapacityCode(code string) bool {
	norm := strings.ToUpper(code)
	for _, c := range capacityCodes {
		if norm == c || strings.EqualFold(strings.ReplaceAll(c, "_", ""), code) {
			return true
		}
	}
	return false
}

// apiError names the operation and classifies an SDK error as one of the
// provider's portable errors, keeping the SDK error reachable.
func apiError(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("gcp: %s: %w", op, err)
	}
	var kind error
	var ge *googleapi.Error
	switch {
	case errors.As(err, &ge):
		kind = classify(ge)
	default:
		kind = provider.ErrTransient
	}
	return fmt.Errorf("gcp: %s: %w: %w", op, kind, err)
}

func classify(ge *googleapi.Error) error {
	for _, item := range ge.Errors {
		if isCapacityCode(item.Reason) {
			return provider.ErrCapacity
		}
	}
	switch ge.Code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return provider.ErrUnauthenticated
	case http.StatusNotFound:
		return provider.ErrNotFound
	case http.StatusConflict, http.StatusPreconditionFailed:
		return provider.ErrConflict
	case http.StatusBadRequest:
		return provider.ErrPrecondition
	}
	return provider.ErrTransient
}

// notFound reports whether err is Compute Engine's 404.
func notFound(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusNotFound
}

// opError is the error of a finished operation, classified by its error
// codes; nil when it succeeded.
func opError(what string, op *computepb.Operation) error {
	if op.GetError() == nil || len(op.GetError().GetErrors()) == 0 {
		if c := op.GetHttpErrorStatusCode(); c != 0 && (c < 200 || c > 299) {
			return fmt.Errorf("gcp: %s: %w: operation failed with HTTP %d: %s", what, classify(&googleapi.Error{Code: int(c)}), c, op.GetHttpErrorMessage())
		}
		return nil
	}
	kind := error(nil)
	var msgs []string
	for _, e := range op.GetError().GetErrors() {
		msgs = append(msgs, e.GetCode()+": "+e.GetMessage())
		if isCapacityCode(e.GetCode()) {
			kind = provider.ErrCapacity
		}
	}
	if kind == nil {
		kind = classify(&googleapi.Error{Code: int(op.GetHttpErrorStatusCode())})
	}
	return fmt.Errorf("gcp: %s: %w: %s", what, kind, strings.Join(msgs, "; "))
}

// wait waits for a zonal or global operation to finish, polling at the
// backend's interval on its clock, and returns the operation's error.
func (b *Backend) wait(ctx context.Context, what string, op *compute.Operation) error {
	pace := cloud.NewBackoff(b.cfg.PollInterval)
	for !op.Done() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("gcp: %s: wait for operation %s: %w", what, op.Name(), ctx.Err())
		case <-b.rt.Clock.After(pace.Next()):
		}
		if err := op.Poll(ctx); err != nil && !op.Done() {
			return apiError(what+": poll operation "+op.Name(), err)
		}
	}
	return opError(what, op.Proto())
}

// filter renders labels as a Compute Engine list filter.
func filter(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, fmt.Sprintf("(labels.%s = %q)", k, labels[k]))
	}
	return strings.Join(parts, " AND ")
}

// ownership are the labels of every crabbox gcp instance, or of the
// instances of one lease, in their GCP form.
func ownership(leaseID string) map[string]string {
	return cloud.GCPLabels(cloud.Ownership(Name, leaseID))
}
