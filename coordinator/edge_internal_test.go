package coordinator

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestQuoteIsShortAndValid(t *testing.T) {
	for _, s := range []string{"", "cbx_0123456789ab", strings.Repeat("é", 100), strings.Repeat("a", 100<<10), "a\x00b"} {
		q := quote(s)
		if len(q) > 2*maxQuoted+40 || !utf8.ValidString(q) {
			t.Errorf("quote(%.20q...) = %q: %d bytes", s, q, len(q))
		}
	}
	if got := quote("short"); got != `"short"` {
		t.Errorf("quote(short) = %s", got)
	}
}

func TestCleanPath(t *testing.T) {
	for in, want := range map[string]string{
		"":               "/",
		"/v1/whoami":     "/v1/whoami",
		"//v1/whoami":    "/v1/whoami",
		"/v1//leases/x":  "/v1/leases/x",
		"/v1/./whoami":   "/v1/whoami",
		"/v1/../v1/runs": "/v1/runs",
		"/v1/leases/":    "/v1/leases/",
		"v1/health":      "/v1/health",
	} {
		if got := cleanPath(in); got != want {
			t.Errorf("cleanPath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLimitParam(t *testing.T) {
	for in, want := range map[string]int{
		"": 100, "0": 100, "-3": 100, "junk": 100, "1.5": 100, "99999999999999999999": 100,
		"1": 1, "100": 100, "500": 500, "501": 500, "1000": 500,
	} {
		if got := limitParam(in, 100, 500); got != want {
			t.Errorf("limitParam(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestMetricMethod(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "POST": "POST", "get": "other", "PURGE": "other", "": "other"} {
		if got := metricMethod(in); got != want {
			t.Errorf("metricMethod(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCheckBodyTextNamesTheField(t *testing.T) {
	type inner struct {
		Args []string          `json:"args"`
		Env  map[string]string `json:"env"`
	}
	type body struct {
		Name  string `json:"name"`
		Log   string `json:"log" edge:"bytes"`
		Inner *inner `json:"inner"`
	}
	if e := checkBodyText(&body{Name: "ok", Log: "a\x00b", Inner: &inner{Args: []string{"x"}}}); e != nil {
		t.Errorf("clean body: %v", e)
	}
	for _, c := range []struct {
		b     body
		field string
	}{
		{body{Name: "a\x00"}, `"name"`},
		{body{Inner: &inner{Args: []string{"ok", "\xff"}}}, `"inner.args"`},
		{body{Inner: &inner{Env: map[string]string{"k\x00": "v"}}}, `"inner.env"`},
	} {
		e := checkBodyText(&c.b)
		if e == nil || !strings.Contains(e.message, c.field) {
			t.Errorf("%+v: %v, want an error naming %s", c.b, e, c.field)
		}
	}
}
