package linode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"unicode"

	"github.com/linode/linodego"
)

// maxErrorBody is how much of a failed answer's body errorShape reads.
const maxErrorBody = 64 << 10

// errorShape is the transport of the provider's linodego client. linodego
// takes any answer for a success unless it is a JSON body with a
// non-empty "errors" list: a 403 from a proxy, a 404 with another cloud's
// error body or an empty 500 would be decoded as an empty result (doctor
// would report a refused token as accepted). errorShape rewrites every
// answer of status 400 and up that lacks that shape into it, keeping the
// status, with a reason naming the status and a short excerpt of the body
// (the token cut out), so linodego returns an error carrying the status.
// An answer of 1xx or 3xx that the HTTP client does not follow as a
// redirect becomes an error naming its status.
type errorShape struct {
	base  http.RoundTripper
	token string
}

func (t errorShape) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || (resp.StatusCode >= 200 && resp.StatusCode < 300) {
		return resp, err
	}
	if resp.StatusCode < 400 {
		if redirect(resp) {
			return resp, nil
		}
		_ = resp.Body.Close()
		return nil, fmt.Errorf("%s %s: unexpected answer %s from the Linode API", req.Method, req.URL.Path, resp.Status)
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_ = resp.Body.Close()
	if rerr == nil && hasErrorList(req, resp, body) {
		resp.Header = resp.Header.Clone()
		resp.Header.Set("Content-Type", req.Header.Get("Accept")) // "application/json; charset=utf-8" is that too
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	reason := "answer " + resp.Status + " without an error list"
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		reason += " (" + ct + ")"
	}
	if ex := t.excerpt(body); ex != "" {
		reason += ": " + ex
	}
	shaped, err := json.Marshal(linodego.APIError{Errors: []linodego.APIErrorReason{{Reason: reason}}})
	if err != nil {
		return nil, err
	}
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Type", req.Header.Get("Accept"))
	resp.Header.Del("Content-Encoding")
	resp.Body = io.NopCloser(bytes.NewReader(shaped))
	resp.ContentLength = int64(len(shaped))
	resp.Uncompressed = true
	return resp, nil
}

// redirect reports whether the HTTP client follows resp to another URL.
func redirect(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return resp.Header.Get("Location") != ""
	}
	return false
}

// hasErrorList reports whether linodego reads body as an error: of the
// content type the request accepts, a JSON object with a non-empty
// "errors" list.
func hasErrorList(req *http.Request, resp *http.Response, body []byte) bool {
	want, got := req.Header.Get("Accept"), resp.Header.Get("Content-Type")
	if got != want {
		if mt, _, err := mime.ParseMediaType(got); err != nil || mt != want {
			return false
		}
	}
	var e linodego.APIError
	return json.Unmarshal(body, &e) == nil && len(e.Errors) > 0
}

// excerpt is the start of body on one line, at most 200 characters,
// without the token.
func (t errorShape) excerpt(body []byte) string {
	s := string(body)
	if t.token != "" {
		s = strings.ReplaceAll(s, t.token, "[token]")
	}
	s = strings.Join(strings.FieldsFunc(s, unicode.IsSpace), " ")
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, s)
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "..."
	}
	return s
}

// sdkLogger sends the SDK's log lines (resty's warnings) to the
// runtime's logger instead of the process's standard error.
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l sdkLogger) Warnf(format string, v ...any)  { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l sdkLogger) Debugf(format string, v ...any) { l.log.Debug(fmt.Sprintf(format, v...)) }
