package docker

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
)

func TestAptMirror(t *testing.T) {
	const (
		debianOS = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_CODENAME=bookworm\n"
		ubuntuOS = "ID=ubuntu\nVERSION_CODENAME=noble\n"
		deb822   = `Types: deb
# a comment
URIs: http://mirror.example.internal/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.internal/debian-security
Suites: bookworm-security
Components: main
`
		thirdParty = "Types: deb\nURIs: https://vendor.example.internal/apt\nSuites: nodistro\nComponents: main\n"
	)
	tests := []struct {
		name  string
		files map[string]string
		suite string
		want  string // empty: an error
	}{
		{name: "deb822", suite: "bookworm", want: "http://mirror.example.internal/debian",
			files: map[string]string{"etc/apt/sources.list.d/debian.sources": deb822, "etc/apt/sources.list.d/a-vendor.sources": thirdParty, "etc/os-release": debianOS}},
		{name: "one-line with options", suite: "trixie", want: "http://corp.example.internal/deb",
			files: map[string]string{"etc/apt/sources.list": "# deb http://old.example.internal/debian trixie main\ndeb [arch=amd64 signed-by=/k.gpg] http://corp.example.internal/deb trixie main contrib\n"}},
		{name: "another release from the host's archive", suite: "trixie", want: "http://mirror.example.internal/debian",
			files: map[string]string{"etc/apt/sources.list.d/debian.sources": deb822, "etc/apt/sources.list.d/a-vendor.sources": thirdParty, "etc/os-release": debianOS}},
		{name: "disabled stanza", suite: "bookworm",
			files: map[string]string{"etc/apt/sources.list.d/debian.sources": "Enabled: no\n" + deb822, "etc/os-release": debianOS}},
		{name: "an ubuntu host's archive is not Debian's", suite: "bookworm",
			files: map[string]string{"etc/apt/sources.list": "deb http://archive.example.internal/ubuntu noble main\n", "etc/os-release": ubuntuOS}},
		{name: "no apt configuration", suite: "bookworm", files: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fstest.MapFS{}
			for name, text := range tt.files {
				root[name] = &fstest.MapFile{Data: []byte(text)}
			}
			got, err := aptMirror(root, tt.suite)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "--mirror") {
					t.Errorf("aptMirror = %q, %v; want an error naming --mirror", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("aptMirror (-want +got):\n%s", diff)
			}
		})
	}
}
