package coordinator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
)

// Body size limits.
const (
	// DefaultMaxBodyBytes bounds every request body but a run's finish.
	DefaultMaxBodyBytes = 1 << 20
	// maxFinishBodyBytes bounds a run's finish, which carries its log
	// (JSON-escaped, so larger than the 8 MiB kept).
	maxFinishBodyBytes = 48 << 20
)

// decodeBody reads r's JSON body (at most limit bytes) into v. Unknown
// fields are ignored; a missing or empty body leaves v as it is when
// optional is set. Wrong types name the field. The content type is not
// checked: the body must be JSON whatever the client called it. The errors are ready for the
// client: 413 request_too_large or 400 invalid_request.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, optional bool, v any) *apiError {
	body, e := readBody(w, r, limit)
	if e != nil {
		return e
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			return nil
		}
		return invalid("request body is empty; want a JSON object")
	}
	return decodeJSON(body, v)
}

// readBody reads r's body, at most limit bytes, within the body read
// timeout ServeHTTP set; then it lifts that deadline, so a handler that
// takes longer (a create waiting for its provider) keeps its request.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *apiError) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errorf(http.StatusRequestEntityTooLarge, api.CodeRequestTooLarge, "request body exceeds %d bytes", limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, errorf(http.StatusRequestTimeout, api.CodeRequestTimeout, "request body not received in time")
		}
		return nil, invalid("read request body: %v", err)
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	return body, nil
}

// decodeJSON decodes one JSON object from body into v and refuses strings
// no store can hold (see checkBodyText).
func decodeJSON(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalid("request body has data after the JSON object")
	}
	// JSON escapes can carry NUL bytes (and json.Unmarshal only replaces
	// invalid UTF-8); no store takes those, so they stop here.
	return checkBodyText(v)
}

func jsonError(err error) *apiError {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return invalid("field %q: got JSON %s, want %s", typeErr.Field, typeErr.Value, jsonKind(typeErr.Type.String()))
	case errors.As(err, &typeErr):
		return invalid("request body is JSON %s, want an object", typeErr.Value)
	case errors.As(err, &syntaxErr):
		return invalid("request body is not valid JSON (at byte %d)", syntaxErr.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("request body is truncated JSON")
	}
	return invalid("request body: %v", err)
}

// jsonKind names a Go type the way a JSON client thinks of it.
func jsonKind(goType string) string {
	switch goType {
	case "string", "api.Target":
		return "a string"
	case "bool", "*bool":
		return "a boolean"
	case "int", "int64", "int32", "float64":
		return "a number"
	case "[]string":
		return "an array of strings"
	case "map[string]string":
		return "an object of strings"
	}
	return fmt.Sprintf("a value of type %s", goType)
}
