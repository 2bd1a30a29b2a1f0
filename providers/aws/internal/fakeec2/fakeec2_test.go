package fakeec2_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"go.uber.org/goleak"

	"github.com/crabbox-dev/crabbox/providers/aws/internal/fakeec2"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func client(t *testing.T, url, region string) *ec2.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return ec2.New(ec2.Options{
		Region: region, BaseEndpoint: awssdk.String(url), HTTPClient: &http.Client{Transport: tr},
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
	})
}

func runInput(token string) *ec2.RunInstancesInput {
	return &ec2.RunInstancesInput{
		ImageId: awssdk.String(fakeec2.UbuntuAMD64), InstanceType: types.InstanceTypeT3Small,
		MinCount: awssdk.Int32(1), MaxCount: awssdk.Int32(1), ClientToken: awssdk.String(token),
		TagSpecifications: []types.TagSpecification{{ResourceType: types.ResourceTypeInstance, Tags: []types.Tag{
			{Key: awssdk.String("crabbox"), Value: awssdk.String("true")},
		}}},
	}
}

func TestRunDescribeTerminate(t *testing.T) {
	fake, url := fakeec2.Start(t)
	ctx := context.Background()
	east, west := client(t, url, "us-east-1"), client(t, url, "eu-west-1")

	out, err := east.RunInstances(ctx, runInput("token-1"))
	if err != nil {
		t.Fatal(err)
	}
	id := awssdk.ToString(out.Instances[0].InstanceId)
	if out.Instances[0].State.Name != types.InstanceStateNamePending {
		t.Errorf("new instance is %s, want pending", out.Instances[0].State.Name)
	}
	again, err := east.RunInstances(ctx, runInput("token-1"))
	if err != nil || awssdk.ToString(again.Instances[0].InstanceId) != id {
		t.Errorf("RunInstances with the same token = %v, %v; want instance %s", again, err, id)
	}

	filter := []types.Filter{{Name: awssdk.String("tag:crabbox"), Values: []string{"tr*"}}}
	for _, want := range []types.InstanceStateName{types.InstanceStateNamePending, types.InstanceStateNameRunning} {
		d, err := east.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: filter})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Reservations) != 1 || d.Reservations[0].Instances[0].State.Name != want {
			t.Fatalf("DescribeInstances = %+v, want one %s instance", d.Reservations, want)
		}
		if want == types.InstanceStateNameRunning && awssdk.ToString(d.Reservations[0].Instances[0].PublicIpAddress) != "127.0.0.1" {
			t.Errorf("running instance has no address")
		}
	}
	if d, err := west.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: filter}); err != nil || len(d.Reservations) != 0 {
		t.Errorf("another region sees %+v, %v", d, err)
	}

	_, err = west.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "InvalidInstanceID.NotFound" {
		t.Errorf("terminate in the wrong region: %v, want InvalidInstanceID.NotFound", err)
	}
	if _, err := east.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		t.Fatal(err)
	}
	if got := fake.Instances("us-east-1"); len(got) != 0 {
		t.Errorf("instances after terminate: %+v", got)
	}
	if got, ok := fake.Instance("us-east-1", id); !ok || got.State != "terminated" {
		t.Errorf("terminated instance = %+v, %v; want it visible as terminated", got, ok)
	}
}

func TestFaults(t *testing.T) {
	fake, url := fakeec2.Start(t)
	ec := client(t, url, "us-east-1")
	ctx := context.Background()

	fake.Inject(fakeec2.Fault{Action: "RunInstances", After: true, Code: "InsufficientInstanceCapacity", Times: 1})
	_, err := ec.RunInstances(ctx, runInput("lost"))
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "InsufficientInstanceCapacity" {
		t.Errorf("RunInstances: %v, want the injected error", err)
	}
	if got := fake.Instances("us-east-1"); len(got) != 1 {
		t.Errorf("an After fault should let the action happen: instances %+v", got)
	}

	hctx, cancel := context.WithCancel(ctx)
	fake.Inject(fakeec2.Fault{Action: "DescribeVpcs", Hang: true, OnHang: cancel})
	if _, err := ec.DescribeVpcs(hctx, &ec2.DescribeVpcsInput{}); !errors.Is(err, context.Canceled) {
		t.Errorf("hung call: %v, want context.Canceled", err)
	}
	want := []string{"RunInstances lost", "DescribeVpcs"}
	var got []string
	for _, c := range fake.Calls() {
		got = append(got, c.Action+map[bool]string{true: " " + c.Params.Get("ClientToken"), false: ""}[c.Action == "RunInstances"])
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("calls = %v, want %v", got, want)
	}
}
