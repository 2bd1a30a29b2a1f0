package external_test

import (
	"testing"

	"github.com/crabbox-dev/crabbox/providers/external"
)

func FuzzParseResponse(f *testing.F) {
	f.Add([]byte(`{"protocolVersion":1,"lease":{"leaseId":"cbx_0123456789ab","slug":"tidal-lobster","ssh":{"user":"crabbox","host":"10.0.0.1","port":2222}}}`))
	f.Add([]byte(`{"protocolVersion":1,"leases":[{"leaseId":"cbx_0123456789ab"}]}`))
	f.Add([]byte(`{"protocolVersion":1,"capabilities":{"run":true}}`))
	f.Add([]byte(`{"protocolVersion":1,"error":"boom","errorKind":"not-found"}`))
	f.Add([]byte(`{"protocolVersion":1} {}`))
	f.Add([]byte(`{"protocolVersion":"1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := external.ParseResponse(data)
		if err != nil {
			return
		}
		if resp.ProtocolVersion != external.ProtocolVersion {
			t.Fatalf("accepted protocol version %d", resp.ProtocolVersion)
		}
		if resp.Error != "" || resp.ErrorKind != "" {
			t.Fatalf("accepted a response reporting an error: %+v", resp)
		}
		for i := range resp.Leases {
			_ = external.CheckLeaseForTest(&resp.Leases[i], true)
		}
		if resp.Lease != nil {
			if err := external.CheckLeaseForTest(resp.Lease, true); err == nil && resp.Lease.SSH.Host == "" {
				t.Fatalf("accepted an SSH lease without a host: %+v", resp.Lease)
			}
		}
	})
}

func FuzzParseRunEvent(f *testing.F) {
	f.Add([]byte(`{"stream":"stdout","data":"hello\n"}`))
	f.Add([]byte(`{"exitCode":7}`))
	f.Add([]byte(`{"exitCode":-1}`))
	f.Add([]byte(`{"error":"gone"}`))
	f.Add([]byte(`{"stream":"stdin"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := external.ParseRunEvent(line)
		if err != nil || ev.Error != "" {
			return
		}
		if ev.ExitCode != nil {
			if *ev.ExitCode < 0 || *ev.ExitCode > 255 || ev.Stream != "" {
				t.Fatalf("accepted a bad exit line: %+v", ev)
			}
			return
		}
		if ev.Stream != "stdout" && ev.Stream != "stderr" {
			t.Fatalf("accepted stream %q", ev.Stream)
		}
	})
}
