package junit_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/run/junit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		xml     string
		want    junit.Counts
		wantErr bool
	}{
		{"testsuite with cases", `<?xml version="1.0"?>
<testsuite name="a" tests="4">
  <testcase name="ok"/>
  <testcase name="bad"><failure message="x">boom</failure></testcase>
  <testcase name="err"><error/></testcase>
  <testcase name="skip"><skipped/></testcase>
</testsuite>`, junit.Counts{Tests: 4, Failures: 1, Errors: 1, Skipped: 1}, false},
		{"testsuites nesting suites", `<testsuites>
  <testsuite name="a"><testcase name="1"/><testcase name="2"><failure/></testcase></testsuite>
  <testsuite name="b"><testsuite name="inner"><testcase name="3"><skipped/></testcase></testsuite></testsuite>
</testsuites>`, junit.Counts{Tests: 3, Failures: 1, Skipped: 1}, false},
		{"attributes only", `<testsuite tests="10" failures="2" errors="1" skipped="3"/>`,
			junit.Counts{Tests: 10, Failures: 2, Errors: 1, Skipped: 3}, false},
		{"empty testsuites", `<testsuites/>`, junit.Counts{}, false},
		{"truncated", `<testsuite><testcase name="1">`, junit.Counts{}, true},
		{"not xml", `PASS ok github.com/x 0.1s`, junit.Counts{}, true},
		{"wrong root", `<html><body/></html>`, junit.Counts{}, true},
		{"two roots", `<testsuite/><testsuite/>`, junit.Counts{}, true},
		{"empty", ``, junit.Counts{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := junit.Parse([]byte(tt.xml))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseJUnit error = %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseJUnit counts (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`<testsuites><testsuite><testcase/><testcase><failure/></testcase></testsuite></testsuites>`))
	f.Add([]byte(`<testsuite tests="3" failures="1"/>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := junit.Parse(data)
		if err != nil && c != (junit.Counts{}) {
			t.Errorf("ParseJUnit returned counts %+v with error %v", c, err)
		}
	})
}
