package coordinator

import (
	"fmt"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"strings"
	"unicode/utf8"
)

// Edge limits: what any request may carry before a handler sees it.
const (
	// maxQueryValue bounds one query parameter value.
	maxQueryValue = 1024
	// maxQueryParams bounds the number of query parameter values.
	maxQueryParams = 32
	// maxQuoted is the longest prefix of user input an error message
	// quotes.
	maxQuoted = 64
	// maxMessage bounds an error message, whatever a handler put in it.
	maxMessage = 1024
)

// quote is %q of at most maxQuoted bytes of s (cut at a rune boundary),
// saying how much was left out: error messages never echo large input.
func quote(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}

// badText says what is wrong with v as text a store may hold: invalid
// UTF-8 or a NUL byte. Empty means nothing.
func badText(v string) string {
	switch {
	case !utf8.ValidString(v):
		return "is not valid UTF-8"
	case strings.IndexByte(v, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// checkRequestText validates the parts of the request line every handler
// may pass on to a store: the path and the query parameters. SQLite and
// PostgreSQL differ in what text they take (PostgreSQL refuses NUL bytes
// and invalid UTF-8), so such input is refused here, the same way for both.
func checkRequestText(r *http.Request) *apiError {
	if why := badText(r.URL.Path); why != "" {
		return invalid("request path %s", why)
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return invalid("query string is malformed: %s", quote(r.URL.RawQuery))
	}
	n := 0
	for k, vs := range q {
		if why := badText(k); why != "" {
			return invalid("query parameter name %s", why)
		}
		for _, v := range vs {
			n++
			if why := badText(v); why != "" {
				return invalid("query parameter %s %s", quote(k), why)
			}
			if len(v) > maxQueryValue {
				return invalid("query parameter %s is longer than %d bytes", quote(k), maxQueryValue)
			}
		}
	}
	if n > maxQueryParams {
		return invalid("more than %d query parameters", maxQueryParams)
	}
	return nil
}

// cleanPath is the path the mux routes: ServeMux answers an unclean path
// ("//v1/whoami", "/v1/./leases") with a redirect; the coordinator routes
// its cleaned form instead, so every answer is JSON.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if strings.HasSuffix(p, "/") && np != "/" {
		np += "/"
	}
	return np
}

// checkBodyText walks a decoded request body and refuses any string (in
// structs, slices and maps, keys too) that is not valid UTF-8 or holds a
// NUL byte, naming the JSON field. Fields tagged `edge:"bytes"` (a run's
// log, stored as bytes) are skipped.
func checkBodyText(v any) *apiError {
	return walkText(reflect.ValueOf(v), "")
}

func walkText(v reflect.Value, field string) *apiError {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return walkText(v.Elem(), field)
	case reflect.String:
		if why := badText(v.String()); why != "" {
			return invalid("field %q %s", field, why)
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // json.RawMessage: checked where it is used
		}
		for i := range v.Len() {
			if e := walkText(v.Index(i), field); e != nil {
				return e
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if e := walkText(it.Key(), field); e != nil {
				return e
			}
			if e := walkText(it.Value(), field); e != nil {
				return e
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("edge") == "bytes" {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" {
				name = f.Name
			}
			if field != "" {
				name = field + "." + name
			}
			if e := walkText(v.Field(i), name); e != nil {
				return e
			}
		}
	}
	return nil
}

// metricMethods are the HTTP methods that get their own metrics label;
// any other method counts as "other", so clients cannot grow the series.
var metricMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// metricMethod is the method label of a request.
func metricMethod(m string) string {
	if metricMethods[m] {
		return m
	}
	return "other"
}
