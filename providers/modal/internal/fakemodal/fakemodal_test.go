//go:build unix

package fakemodal_test

import (
	"context"
	"testing"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/crabbox-dev/crabbox/providers/modal/internal/fakemodal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fake refuses requests without the token, pages SandboxList by
// before_timestamp, filters it by tags, and hides terminated sandboxes.
func TestFake(t *testing.T) {
	f, err := fakemodal.Start(t.TempDir(), "id", "secret")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	conn, err := grpc.NewClient(f.URL()[len("http://"):], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewModalClientClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.SandboxListV2(ctx, &pb.SandboxListRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("list without a token: %v, want Unauthenticated", err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "x-modal-token-id", "id", "x-modal-token-secret", "secret")
	for range 3 {
		f.AddSandbox(map[string]string{"owner": "a"})
	}
	gone := f.AddSandbox(map[string]string{"owner": "a"})
	f.AddSandbox(map[string]string{"owner": "b"})
	if _, err := c.SandboxTerminateV2(ctx, pb.SandboxTerminateRequest_builder{SandboxId: gone}.Build()); err != nil {
		t.Fatal(err)
	}
	tags := []*pb.SandboxTag{pb.SandboxTag_builder{TagName: "owner", TagValue: "a"}.Build()}
	var ids []string
	var before float64
	for pages := 0; ; pages++ {
		resp, err := c.SandboxListV2(ctx, pb.SandboxListRequest_builder{Tags: tags, BeforeTimestamp: before}.Build())
		if err != nil {
			t.Fatal(err)
		}
		sbs := resp.GetSandboxes()
		if len(sbs) == 0 {
			if pages != 2 {
				t.Errorf("%d pages, want 2 of at most %d", pages, fakemodal.PageSize)
			}
			break
		}
		for _, s := range sbs {
			ids = append(ids, s.GetId())
		}
		before = sbs[len(sbs)-1].GetCreatedAt()
	}
	if len(ids) != 3 {
		t.Errorf("listed %v, want the 3 live sandboxes of owner a", ids)
	}
}
