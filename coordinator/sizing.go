package coordinator

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/provider"
)

// Size is what a lease asks its provider to create.
type Size struct {
	Class    string
	Image    string
	Location string
	// ServerTypes are the server types the provider is asked for, in its
	// order of preference (a provider may fall back to a later one when
	// the first has no capacity). Empty: the provider has no server types.
	ServerTypes []string
}

// Sizing lets the leases of one provider ask for their own class, server
// type, image and location, within what the coordinator's operator
// allows, and tells the coordinator which server types it really asks
// the provider for (the price estimate uses those, never a client's
// claim).
type Sizing struct {
	// Default is the size the provider's configured backend creates.
	Default Size
	// Allowed lists, per lease request field ("class", "serverType",
	// "image", "location"), the values a lease may ask for besides the
	// default. A field without a list offers only the default.
	Allowed map[string][]string
	// Orgs replaces Allowed's list of a field for the leases of an org.
	Orgs map[string]map[string][]string
	// Configure returns the backend that creates boxes of a size other
	// than the default, configured through the provider's own options.
	// Required when anything is allowed. It is called for every create,
	// touch and delete of such a lease, so it should reuse backends.
	Configure func(Size) (provider.SSHLeaseBackend, error)
}

// sizeFields are the lease request fields a Sizing governs.
var sizeFields = []string{"class", "serverType", "image", "location"}

func (z Sizing) check(name string) error {
	for f := range z.Allowed {
		if !slices.Contains(sizeFields, f) {
			return fmt.Errorf("provider %q sizing: %q is not a sizing field (want %s)", name, f, strings.Join(sizeFields, ", "))
		}
	}
	for org, m := range z.Orgs {
		for f := range m {
			if !slices.Contains(sizeFields, f) {
				return fmt.Errorf("provider %q sizing of org %q: %q is not a sizing field (want %s)", name, org, f, strings.Join(sizeFields, ", "))
			}
		}
	}
	if (len(z.Allowed) > 0 || len(z.Orgs) > 0) && z.Configure == nil {
		return fmt.Errorf("provider %q sizing allows sizes but has no Configure", name)
	}
	return nil
}

// field returns the size's value of a request field.
func (z Size) field(f string) string {
	switch f {
	case "class":
		return z.Class
	case "serverType":
		return strings.Join(z.ServerTypes, ",")
	case "image":
		return z.Image
	default:
		return z.Location
	}
}

func (z *Size) set(f, v string) {
	switch f {
	case "class":
		z.Class = v
	case "serverType":
		z.ServerTypes = []string{v}
	case "image":
		z.Image = v
	default:
		z.Location = v
	}
}

func (z Size) equal(o Size) bool {
	return z.Class == o.Class && z.Image == o.Image && z.Location == o.Location && slices.Equal(z.ServerTypes, o.ServerTypes)
}

// governsClass reports whether the sizing decides a lease's class. A
// class is a label of the client's unless the provider has classes of its
// own (a default or allowed classes): then it is validated like the rest.
func (z Sizing) governsClass() bool {
	if z.Default.Class != "" || len(z.Allowed["class"]) > 0 {
		return true
	}
	for _, m := range z.Orgs {
		if _, ok := m["class"]; ok {
			return true
		}
	}
	return false
}

// allowed is the list of values org may ask for in field f.
func (z Sizing) allowed(org, f string) []string {
	if m, ok := z.Orgs[org]; ok {
		if vs, ok := m[f]; ok {
			return vs
		}
	}
	return z.Allowed[f]
}

// sized picks the size and backend of a new lease: the provider's default
// unless the request asks, within what the configuration allows, for
// another class, server type, image or location. Without a Sizing for
// the provider, the request's fields are recorded as the client's and
// nothing of them reaches the provider.
func (s *Server) sized(spec leaseSpec, org string) (Size, bool, provider.SSHLeaseBackend, *apiError) {
	b, e := s.backend(spec.Provider)
	if e != nil {
		return Size{}, false, nil, e
	}
	z, ok := s.sizing[spec.Provider]
	if !ok {
		return Size{}, false, b, nil
	}
	size := z.Default
	size.ServerTypes = slices.Clone(size.ServerTypes)
	asked := map[string]string{"class": spec.Class, "serverType": spec.ServerType, "image": spec.Image, "location": spec.Location}
	for _, f := range sizeFields {
		if f == "class" && !z.governsClass() {
			continue
		}
		v, def := asked[f], z.Default.field(f)
		if v == "" || v == def {
			continue
		}
		allowed := z.allowed(org, f)
		if !slices.Contains(allowed, v) {
			offer := "only its configured default"
			if def != "" {
				offer = fmt.Sprintf("only its configured default %q", def)
			}
			if len(allowed) > 0 {
				offer = "besides the default: " + strings.Join(allowed, ", ")
			}
			return Size{}, false, nil, invalid("field %q: %q is not offered for provider %q to org %q (this coordinator offers %s)", f, v, spec.Provider, org, offer)
		}
		size.set(f, v)
	}
	if !size.equal(z.Default) {
		sb, err := z.Configure(size)
		if err != nil {
			return Size{}, false, nil, errorf(http.StatusFailedDependency, api.CodeProviderNotConfigured,
				"provider %q cannot be configured for this size: %v", spec.Provider, err)
		}
		b = sb
	}
	if !z.governsClass() {
		size.Class = spec.Class // recorded as the client's
	}
	return size, true, b, nil
}

// leaseBackend returns the backend that manages l's box: the provider's
// own, or the one configured for the lease's size.
func (s *Server) leaseBackend(l store.Lease) (provider.SSHLeaseBackend, error) {
	b, ok := s.providers[l.Provider]
	if !ok {
		return nil, fmt.Errorf("provider %q is not configured on this coordinator", l.Provider)
	}
	z, ok := s.sizing[l.Provider]
	if !ok {
		return b, nil
	}
	def, class := z.Default, l.Class
	if !z.governsClass() {
		class = def.Class // the client's label, not a size
	}
	if class == def.Class && l.Image == def.Image && l.Location == def.Location &&
		(l.ServerType == "" || slices.Contains(def.ServerTypes, l.ServerType)) {
		return b, nil
	}
	size := Size{Class: class, Image: l.Image, Location: l.Location}
	if l.ServerType != "" {
		size.ServerTypes = []string{l.ServerType}
	}
	sb, err := z.Configure(size)
	if err != nil {
		return nil, fmt.Errorf("provider %q for the size of lease %s: %w", l.Provider, l.ID, err)
	}
	return sb, nil
}

// estimate is the hourly price of a lease of size (sized false: the
// provider's server type is unknown here): the dearest of the server
// types the coordinator asks the provider for. With a monthly USD limit
// in force, a type without a price is refused (fail closed), naming the
// type and the config key to set.
func (s *Server) estimate(providerName string, size Size, sized bool) (float64, *apiError) {
	types := size.ServerTypes
	if !sized || len(types) == 0 {
		types = []string{""}
	}
	limited := s.limits.MaxMonthlyUSD > 0 || s.limits.MaxMonthlyUSDPerOwner > 0 || s.limits.MaxMonthlyUSDPerOrg > 0
	hourly := 0.0
	for _, t := range types {
		p, ok := s.priceOf(providerName, t)
		if !ok && limited {
			what := fmt.Sprintf("server type %q of provider %q", t, providerName)
			entry := fmt.Sprintf(`{"provider": %q, "serverType": %q, "hourlyUSD": ...}`, providerName, t)
			if t == "" {
				what = fmt.Sprintf("provider %q (its server type is unknown to this coordinator)", providerName)
				entry = fmt.Sprintf(`{"provider": %q, "hourlyUSD": ...}`, providerName)
			}
			return 0, errorf(http.StatusFailedDependency, api.CodeProviderNotConfigured,
				"%s has no price and a monthly USD limit applies: add %s to \"prices\" in the coordinator config", what, entry)
		}
		hourly = max(hourly, p)
	}
	return hourly, nil
}
