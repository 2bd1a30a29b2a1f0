package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// apiError is an error with its HTTP status and wire code. Its message is
// shown to the client, so it never carries secrets or internals.
type apiError struct {
	status  int
	code    string
	message string
	lease   *api.Lease
}

func (e *apiError) Error() string { return e.code + ": " + e.message }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, api.CodeInvalidRequest, format, args...)
}

func notFound(format string, args ...any) *apiError {
	return errorf(http.StatusNotFound, api.CodeNotFound, format, args...)
}

func forbidden(format string, args ...any) *apiError {
	return errorf(http.StatusForbidden, api.CodeForbidden, format, args...)
}

// conflict is a 409 with a specific code.
func conflict(code, format string, args ...any) *apiError {
	return errorf(http.StatusConflict, code, format, args...)
}

// storeError maps a store error to the wire. what names the subject ("lease
// cbx_..."). Errors that are not the store's sentinels are internal: the
// client sees a generic message and the log gets the detail.
func storeError(err error, what string) *apiError {
	var changed *store.StateChangedError
	var limit *store.LimitError
	switch {
	case errors.As(err, &changed):
		e := conflict(api.CodeLeaseStateChanged, "%s is %s", what, changed.Lease.State)
		l := toAPILease(changed.Lease)
		e.lease = &l
		return e
	case errors.As(err, &limit):
		return errorf(http.StatusTooManyRequests, api.CodeCostLimitExceeded, "%s", limit.Error())
	case errors.Is(err, store.ErrNotFound):
		return notFound("%s not found", what)
	case errors.Is(err, store.ErrAttemptConflict):
		return conflict(api.CodeCreateAttemptConflict, "%s is bound to a different create attempt", what)
	case errors.Is(err, store.ErrLeaseIDConflict):
		return conflict(api.CodeLeaseIDConflict, "%s is already in use or has ended", what)
	case errors.Is(err, store.ErrCreateCanceled):
		return conflict(api.CodeCreateCanceled, "create attempt for %s was canceled", what)
	case errors.Is(err, store.ErrLeaseExpired):
		return conflict(api.CodeLeaseExpired, "%s has expired", what)
	case errors.Is(err, store.ErrLeaseEnded):
		return conflict(api.CodeLeaseEnded, "%s has ended", what)
	case errors.Is(err, store.ErrProviderMismatch):
		return conflict(api.CodeProviderIdentityMismatch, "%s belongs to a different provider", what)
	case errors.Is(err, store.ErrRunFinished), errors.Is(err, store.ErrRunConflict):
		return conflict(api.CodeRunFinished, "%s has already finished", what)
	case errors.Is(err, store.ErrInvalid):
		return invalid("%s: %v", what, err)
	}
	return nil
}

// writeJSON writes v as the response body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		// Every response type marshals; reaching this is a bug.
		status = http.StatusInternalServerError
		body = []byte(`{"error":"internal_error","message":"encode response"}`)
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

func writeError(w http.ResponseWriter, e *apiError) {
	msg := e.message
	if len(msg) > maxMessage {
		// Handlers quote user input with quote; this bounds the rest.
		msg = strings.ToValidUTF8(msg[:maxMessage], "") + "…"
	}
	writeJSON(w, e.status, api.Error{Code: e.code, Message: msg, Lease: e.lease})
}
