// Package cloud is what every cloud provider of crabbox (Hetzner, AWS, GCP,
// Azure) shares: ownership labels, the cleanup decision, the box bootstrap,
// acquire rollback, capacity fallback and the wait for SSH.
//
// It holds primitives, not an acquisition sequence: each provider owns the
// order of its own acquire steps and calls these helpers from them.
//
// # Labels
//
// Every cloud resource crabbox creates carries the ownership labels of
// NewLabels (the Label* keys, see IsOwnershipKey; values sanitised by SanitizeValue to
// [A-Za-z0-9_.-], at most 63 characters, or by GCPLabels for clouds that
// want lowercase). ParseLabels reads them back into the fields of a
// provider.LeaseTarget, and Touch rewrites last_touched_at and expires_at.
//
// # Cleanup
//
// DecideCleanup is the one pure function that says whether a box may be
// deleted, from its labels, whether the caller holds a claim (or, brokered,
// a coordinator record) for it, and the time. Providers call it once while
// listing and again on the freshly re-read resource just before deleting.
//
// # Bootstrap
//
// Bootstrap renders the user data that turns a fresh Linux image into a box:
// the crabbox user with only the lease's key, sshd on 2222 and 22 with a
// host key made by the client (NewHostKey), the work root, a ready marker and
// the crabbox-ready check, and a self-destruct timer that powers the box off
// at the lease's TTL. A step that fails still leaves sshd serving the
// client's host key, its banner naming the step (FailedMarker), so that
// WaitForSSH returns a *BootstrapError at once. Where the cloud terminates a machine that powers itself
// off (AWS with shutdown behaviour "terminate", GCP and Azure with the
// matching settings) that ends the box; where it keeps stopped machines
// (Hetzner) it stops the work but not the bill, and cleanup must follow. The
// private host key is a secret: HostKey never prints it.
//
// # Acquire
//
// Rollback is an undo stack that a provider's Acquire fills as it creates
// resources and runs in reverse, with a fresh bounded context, when the
// acquire fails or its context is cancelled. Step names the acquire steps so
// errors and tests agree on them. FirstWithCapacity walks server types and
// locations, moving on only on capacity errors. WaitForSSH polls a box until
// it answers with the pinned host key.
package cloud
