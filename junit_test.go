package crabbox_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/crabbox-dev/crabbox"
)

func TestParseJUnit(t *testing.T) {
	tests := []struct {
		name    string
		xml     string
		want    crabbox.JUnitCounts
		wantErr bool
	}{
		{"testsuite with cases", `<?xml version="1.0"?>
<testsuite name="a" tests="4">
  <testcase name="ok"/>
  <testcase name="bad"><failure message="x">boom</failure></testcase>
  <testcase name="err"><error/></testcase>
  <testcase name="skip"><skipped/></testcase>
</testsuite>`, crabbox.JUnitCounts{Tests: 4, Failures: 1, Errors: 1, Skipped: 1}, false},
		{"testsuites nesting suites", `<testsuites>
  <testsuite name="a"><testcase name="1"/><testcase name="2"><failure/></testcase></testsuite>
  <testsuite name="b"><testsuite name="inner"><testcase name="3"><skipped/></testcase></testsuite></testsuite>
</testsuites>`, crabbox.JUnitCounts{Tests: 3, Failures: 1, Skipped: 1}, false},
		{"attributes only", `<testsuite tests="10" failures="2" errors="1" skipped="3"/>`,
			crabbox.JUnitCounts{Tests: 10, Failures: 2, Errors: 1, Skipped: 3}, false},
		{"empty testsuites", `<testsuites/>`, crabbox.JUnitCounts{}, false},
		{"truncated", `<testsuite><testcase name="1">`, crabbox.JUnitCounts{}, true},
		{"not xml", `PASS ok github.com/x 0.1s`, crabbox.JUnitCounts{}, true},
		{"wrong root", `<html><body/></html>`, crabbox.JUnitCounts{}, true},
		{"two roots", `<testsuite/><testsuite/>`, crabbox.JUnitCounts{}, true},
		{"empty", ``, crabbox.JUnitCounts{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := crabbox.ParseJUnit([]byte(tt.xml))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseJUnit error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseJUnit counts (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseJUnit(f *testing.F) {
	f.Add([]byte(`<testsuites><testsuite><testcase/><testcase><failure/></testcase></testsuite></testsuites>`))
	f.Add([]byte(`<testsuite tests="3" failures="1"/>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := crabbox.ParseJUnit(data)
		if err != nil && c != (crabbox.JUnitCounts{}) {
			t.Errorf("ParseJUnit returned counts %+v with error %v", c, err)
		}
	})
}
