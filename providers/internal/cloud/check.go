package cloud

import "time"

// CheckBootstrap renders a bootstrap with the provider's work root, ports
// and prepared setting once, so a provider fails at configuration time
// rather than at its first acquire.
func CheckBootstrap(workRoot string, ports []int, prepared bool) error {
	probe, err := NewHostKey()
	if err != nil {
		return err
	}
	_, err = Bootstrap{
		AuthorizedKey: probe.AuthorizedKey(), HostKey: probe, SelfDestructAfter: time.Hour,
		WorkRoot: workRoot, Ports: ports, Prepared: prepared,
	}.Script()
	return err
}
