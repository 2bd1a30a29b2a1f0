package docker

import (
	"strings"
	"testing"
)

func TestCheckImageRef(t *testing.T) {
	for _, ref := range []string{
		"busybox", "busybox:latest", "crabbox/box:bookworm", "crabbox-test/busybox:1234-built",
		"localhost/box", "localhost:5000/team/box:v1.2", "registry.example.com/a/b/c", "Registry.Example.com/box",
		"[::1]:5000/box:1", "a__b/c.d/e--f_g", "192.168.0.1/box:T_1",
	} {
		if err := checkImageRef(ref); err != nil {
			t.Errorf("checkImageRef(%q): %v", ref, err)
		}
	}
	for _, tc := range []struct{ ref, want string }{
		{"", "empty"},
		{"Busybox", "lowercase"},
		{"box:", "tag"},
		{"box:-v1", "tag"},
		{"box:" + strings.Repeat("x", 129), "tag"},
		{"box@sha256:" + strings.Repeat("a", 64), "digest"},
		{"team//box", `"" is not a valid name component`},
		{"team/box-", `"box-" is not a valid name component`},
		{"team/b___x", "is not a valid name component"},
		{"-team/box", "is not a valid name component"},
		{"host:port/box", `port "port"`},
		{"ex-.com/box", "host name component"},
		{"[zz]:1/box", "IPv6"},
		{strings.Repeat("a", 64), "image ID"},
		{strings.Repeat("a/", 128) + "a", "more than 255"},
	} {
		if err := checkImageRef(tc.ref); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("checkImageRef(%q): err = %v, want one containing %q", tc.ref, err, tc.want)
		}
	}
}
