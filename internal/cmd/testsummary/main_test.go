package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSummarize(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"a"}`,
		`{"Action":"run","Package":"a","Test":"TestX"}`,
		`{"Action":"output","Package":"a","Test":"TestX","Output":"=== RUN   TestX\n"}`,
		`{"Action":"output","Package":"a","Test":"TestX","Output":"    x_test.go:1: docker engine tests skipped: no busybox\n"}`,
		`{"Action":"skip","Package":"a","Test":"TestX"}`,
		`{"Action":"output","Package":"a","Output":"PASS\n"}`,
		`{"Action":"output","Package":"a","Output":"crabbox: 1 docker engine test skipped: no busybox; to run them: bash .ci/setup.d/10-docker.sh\n"}`,
		`{"Action":"output","Package":"a","Output":"ok  \ta\t0.1s\n"}`,
		`{"Action":"pass","Package":"a"}`,
		`{"Action":"output","Package":"b","Output":"?   \tb\t[no test files]\n"}`,
		`{"Action":"skip","Package":"b"}`,
		`{"Action":"output","Package":"c","Test":"TestY","Output":"    y_test.go:2: wrong\n"}`,
		`{"Action":"output","Package":"c","Test":"TestY","Output":"--- FAIL: TestY (0.00s)\n"}`,
		`{"Action":"output","Package":"c","Output":"FAIL\tc\t0.2s\n"}`,
		`{"Action":"fail","Package":"c"}`,
		`go: some message of go's own`,
	}, "\n")
	var out strings.Builder
	failed, err := summarize(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	want := "crabbox: 1 docker engine test skipped: no busybox; to run them: bash .ci/setup.d/10-docker.sh\n" +
		"ok  \ta\t0.1s\n" +
		"?   \tb\t[no test files]\n" +
		"    y_test.go:2: wrong\n--- FAIL: TestY (0.00s)\nFAIL\tc\t0.2s\n" +
		"go: some message of go's own\n"
	if diff := cmp.Diff(want, out.String()); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	if !failed {
		t.Error("failed = false with a failing package")
	}
}
