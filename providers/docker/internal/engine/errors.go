package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Error is an answer of the engine that is not a success.
type Error struct {
	Op      string // what was asked, naming the container or image
	Status  int    // the HTTP status
	Message string // the engine's message
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (engine status %d)", e.Op, e.Message, e.Status)
}

// ConnectError is a request that did not reach the engine, or whose
// connection broke before the engine answered.
type ConnectError struct {
	Op   string
	Host string // the engine's address
	Err  error
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("%s: cannot reach the docker engine at %s (is it running?): %v", e.Op, e.Host, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

func statusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound reports whether the engine answered that the container or
// image asked for does not exist.
func IsNotFound(err error) bool { return statusOf(err) == http.StatusNotFound }

// IsConflict reports whether the engine refused because of the state of
// the container or image (a name in use, a removal in progress).
func IsConflict(err error) bool { return statusOf(err) == http.StatusConflict }

// IsDenied reports whether the engine refused the caller.
func IsDenied(err error) bool {
	s := statusOf(err)
	return s == http.StatusUnauthorized || s == http.StatusForbidden
}

// IsExhausted reports whether the engine refused for lack of resources.
func IsExhausted(err error) bool { return statusOf(err) == http.StatusTooManyRequests }

// IsUnavailable reports whether the engine could not be reached, said it
// is unavailable, or did not answer before the deadline: the kinds of
// failure a later try may not meet.
func IsUnavailable(err error) bool {
	var c *ConnectError
	return statusOf(err) == http.StatusServiceUnavailable || errors.As(err, &c) || errors.Is(err, context.DeadlineExceeded)
}

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 64 << 10

// answerError reads the error answer res (and closes its body).
func answerError(op string, res *http.Response) error {
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
	var m struct {
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &m) == nil && m.Message != "" {
		msg = m.Message
	}
	if msg == "" {
		msg = http.StatusText(res.StatusCode)
	}
	return &Error{Op: op, Status: res.StatusCode, Message: msg}
}
