package runpod

import (
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Environment variables of a crabbox pod.
const (
	// BootstrapEnv holds the bootstrap script, base64-encoded. It is a
	// secret (the box's private host key).
	BootstrapEnv = "CRABBOX_BOOTSTRAP"
	// LabelsEnv holds the ownership labels, "key=value" separated by
	// commas (label values have no ',' or '=').
	LabelsEnv = "CRABBOX_LABELS"
	// DeleteAtEnv holds when the watchdog deletes the pod, Unix seconds.
	DeleteAtEnv = "CRABBOX_DELETE_AT"
	// APIEnv holds the API's base URL for the watchdog's curl.
	APIEnv = "CRABBOX_RUNPOD_API"
)

// sshPort is the pod port sshd listens on, exposed as "22/tcp".
const sshPort = 22

// entrypoint replaces the image's: the start command is a shell script.
var entrypoint = []string{"/bin/sh", "-c"}

// startCommand is the pod's start command (no secret in it: it reads the
// environment). It arms the watchdog first, so that not even a failed
// bootstrap outlives the lease's end, then runs the bootstrap and sleeps
// as the container's main process. The watchdog deletes the pod at
// CRABBOX_DELETE_AT with the pod-scoped key RunPod injects
// (RUNPOD_API_KEY, RUNPOD_POD_ID): runpodctl (both its syntaxes), else
// curl with the key on its standard input, never in an argument; it tries
// again each minute. The deadline is absolute, so a pod RunPod restarts
// keeps it.
const startCommand = `umask 077
mkdir -p /var/lib/crabbox
nohup /bin/sh -c '
left=$(( ${CRABBOX_DELETE_AT:-0} - $(date +%s) ))
[ "$left" -gt 0 ] && sleep "$left"
while :; do
	runpodctl pod delete "$RUNPOD_POD_ID" && exit 0
	runpodctl remove pod "$RUNPOD_POD_ID" && exit 0
	printf "Authorization: Bearer %s\n" "$RUNPOD_API_KEY" |
		curl -fsS -X DELETE -H @- "$CRABBOX_RUNPOD_API/pods/$RUNPOD_POD_ID" && exit 0
	sleep 60
done' >/var/lib/crabbox/watchdog.log 2>&1 </dev/null &
echo "$CRABBOX_BOOTSTRAP" | base64 -d >/var/lib/crabbox/bootstrap.sh &&
	/bin/sh /var/lib/crabbox/bootstrap.sh >/var/lib/crabbox/bootstrap.out 2>&1
rm -f /var/lib/crabbox/bootstrap.sh
unset CRABBOX_BOOTSTRAP
exec sleep infinity
`

// podEnv is the environment of a new pod: the bootstrap, the labels, the
// watchdog's deadline and API, and the lease key as RunPod's images read
// it.
func podEnv(userData string, labels map[string]string, deleteAt time.Time, endpoint, publicKey string) map[string]string {
	key := strings.TrimSpace(publicKey)
	return map[string]string{
		BootstrapEnv:     base64.StdEncoding.EncodeToString([]byte(userData)),
		LabelsEnv:        encodeLabels(labels),
		DeleteAtEnv:      strconv.FormatInt(deleteAt.Unix(), 10),
		APIEnv:           strings.TrimRight(endpoint, "/"),
		"PUBLIC_KEY":     key,
		"SSH_PUBLIC_KEY": key,
	}
}

// encodeLabels writes labels as "k=v,k=v", sorted by key.
func encodeLabels(labels map[string]string) string {
	var b strings.Builder
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + labels[k])
	}
	return b.String()
}

// decodeLabels reads labels written by encodeLabels.
func decodeLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%s: %q is not key=value", LabelsEnv, kv)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s: label %q twice", LabelsEnv, k)
		}
		out[k] = v
	}
	return out, nil
}
