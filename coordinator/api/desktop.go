package api

// CodeNoDesktop (409) refuses the desktop of a lease without one (a lease
// without the label desktop=true): GET /v1/leases/{id}/vnc.
const CodeNoDesktop = "no_desktop"
