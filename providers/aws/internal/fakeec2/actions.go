package fakeec2

import (
	"encoding/base64"
	"encoding/xml"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Every handler runs with s.mu held.

type keyPairXML struct {
	ID          string   `xml:"keyPairId"`
	Name        string   `xml:"keyName"`
	Fingerprint string   `xml:"keyFingerprint"`
	Tags        []xmlTag `xml:"tagSet>item"`
}

func (s *Server) importKeyPair(r *region, c Call) (any, *APIError) {
	name := c.Params.Get("KeyName")
	if name == "" {
		return nil, apiErr("MissingParameter", "the request must contain the parameter KeyName")
	}
	for _, k := range r.keys {
		if k.Name == name {
			return nil, apiErr("InvalidKeyPair.Duplicate", "the keypair %q already exists", name)
		}
	}
	material, err := base64.StdEncoding.DecodeString(c.Params.Get("PublicKeyMaterial"))
	if err != nil || !strings.HasPrefix(string(material), "ssh-") {
		return nil, apiErr("InvalidKey.Format", "key is not in valid OpenSSH public key format")
	}
	k := &KeyPair{ID: s.newID("key-"), Name: name, PublicKey: string(material), Region: c.Region, Tags: tagSpecs(c.Params, "key-pair")}
	r.keys[k.ID] = k
	return struct {
		XMLName xml.Name `xml:"ImportKeyPairResponse"`
		Xmlns   string   `xml:"xmlns,attr"`
		keyPairXML
	}{Xmlns: xmlns, keyPairXML: keyPairXML{ID: k.ID, Name: k.Name, Fingerprint: "fake", Tags: xmlTags(k.Tags)}}, nil
}

func (s *Server) describeKeyPairs(r *region, c Call) (any, *APIError) {
	ids, names, fs := list(c.Params, "KeyPairId"), list(c.Params, "KeyName"), filters(c.Params)
	var out []keyPairXML
	for _, k := range sortedValues(r.keys) {
		attr := func(name string) []string {
			if v, ok := tagAttr(k.Tags, name); ok {
				return v
			}
			return map[string][]string{"key-name": {k.Name}, "key-pair-id": {k.ID}}[name]
		}
		if (len(ids) > 0 && !slices.Contains(ids, k.ID)) || (len(names) > 0 && !slices.Contains(names, k.Name)) || !matches(fs, attr) {
			continue
		}
		out = append(out, keyPairXML{ID: k.ID, Name: k.Name, Fingerprint: "fake", Tags: xmlTags(k.Tags)})
	}
	for _, id := range ids {
		if r.keys[id] == nil {
			return nil, apiErr("InvalidKeyPair.NotFound", "the key pair %q does not exist", id)
		}
	}
	return struct {
		XMLName xml.Name     `xml:"DescribeKeyPairsResponse"`
		Xmlns   string       `xml:"xmlns,attr"`
		Keys    []keyPairXML `xml:"keySet>item"`
	}{Xmlns: xmlns, Keys: out}, nil
}

// deleteKeyPair succeeds for a key that does not exist, as EC2 does.
func (s *Server) deleteKeyPair(r *region, c Call) (any, *APIError) {
	id, name := c.Params.Get("KeyPairId"), c.Params.Get("KeyName")
	for kid, k := range r.keys {
		if (id != "" && kid == id) || (id == "" && name != "" && k.Name == name) {
			delete(r.keys, kid)
		}
	}
	return okResponse("DeleteKeyPair"), nil
}

func (s *Server) describeVpcs(r *region, c Call) (any, *APIError) {
	type vpcXML struct {
		ID      string `xml:"vpcId"`
		Default bool   `xml:"isDefault"`
		State   string `xml:"state"`
	}
	fs := filters(c.Params)
	var out []vpcXML
	for i, id := range r.vpcs {
		attr := func(name string) []string {
			return map[string][]string{"vpc-id": {id}, "is-default": {strconv.FormatBool(i == 0)}, "isDefault": {strconv.FormatBool(i == 0)}}[name]
		}
		if matches(fs, attr) {
			out = append(out, vpcXML{id, i == 0, "available"})
		}
	}
	return struct {
		XMLName xml.Name `xml:"DescribeVpcsResponse"`
		Xmlns   string   `xml:"xmlns,attr"`
		VPCs    []vpcXML `xml:"vpcSet>item"`
	}{Xmlns: xmlns, VPCs: out}, nil
}

type ipRangeXML struct {
	CIDR string `xml:"cidrIp"`
}

type permissionXML struct {
	Protocol string       `xml:"ipProtocol"`
	From     int          `xml:"fromPort"`
	To       int          `xml:"toPort"`
	Ranges   []ipRangeXML `xml:"ipRanges>item"`
}

func (s *Server) describeSecurityGroups(r *region, c Call) (any, *APIError) {
	type groupXML struct {
		ID          string          `xml:"groupId"`
		Name        string          `xml:"groupName"`
		Description string          `xml:"groupDescription"`
		VPC         string          `xml:"vpcId"`
		Permissions []permissionXML `xml:"ipPermissions>item"`
		Tags        []xmlTag        `xml:"tagSet>item"`
	}
	ids, fs := list(c.Params, "GroupId"), filters(c.Params)
	for _, id := range ids {
		if r.groups[id] == nil {
			return nil, apiErr("InvalidGroup.NotFound", "the security group %q does not exist", id)
		}
	}
	var out []groupXML
	for _, g := range sortedValues(r.groups) {
		attr := func(name string) []string {
			if v, ok := tagAttr(g.Tags, name); ok {
				return v
			}
			return map[string][]string{"group-name": {g.Name}, "group-id": {g.ID}, "vpc-id": {g.VPC}}[name]
		}
		if (len(ids) > 0 && !slices.Contains(ids, g.ID)) || !matches(fs, attr) {
			continue
		}
		gx := groupXML{ID: g.ID, Name: g.Name, Description: g.Description, VPC: g.VPC, Tags: xmlTags(g.Tags)}
		for _, rule := range g.Ingress {
			gx.Permissions = append(gx.Permissions, permissionXML{rule.Protocol, rule.From, rule.To, []ipRangeXML{{rule.CIDR}}})
		}
		out = append(out, gx)
	}
	return struct {
		XMLName xml.Name   `xml:"DescribeSecurityGroupsResponse"`
		Xmlns   string     `xml:"xmlns,attr"`
		Groups  []groupXML `xml:"securityGroupInfo>item"`
	}{Xmlns: xmlns, Groups: out}, nil
}

func (s *Server) createSecurityGroup(r *region, c Call) (any, *APIError) {
	name, vpc := c.Params.Get("GroupName"), c.Params.Get("VpcId")
	if name == "" || c.Params.Get("GroupDescription") == "" {
		return nil, apiErr("MissingParameter", "GroupName and GroupDescription are required")
	}
	if vpc == "" {
		vpc = DefaultVPC
	}
	if !slices.Contains(r.vpcs, vpc) {
		return nil, apiErr("InvalidVpcID.NotFound", "the vpc ID %q does not exist", vpc)
	}
	for _, g := range r.groups {
		if g.Name == name && g.VPC == vpc {
			return nil, apiErr("InvalidGroup.Duplicate", "the security group %q already exists for VPC %q", name, vpc)
		}
	}
	g := &SecurityGroup{ID: s.newID("sg-"), Name: name, Description: c.Params.Get("GroupDescription"), VPC: vpc, Region: c.Region, Tags: tagSpecs(c.Params, "security-group")}
	r.groups[g.ID] = g
	return struct {
		XMLName xml.Name `xml:"CreateSecurityGroupResponse"`
		Xmlns   string   `xml:"xmlns,attr"`
		ID      string   `xml:"groupId"`
		Tags    []xmlTag `xml:"tagSet>item"`
	}{Xmlns: xmlns, ID: g.ID, Tags: xmlTags(g.Tags)}, nil
}

func (s *Server) authorizeIngress(r *region, c Call) (any, *APIError) {
	g := r.groups[c.Params.Get("GroupId")]
	if g == nil {
		return nil, apiErr("InvalidGroup.NotFound", "the security group %q does not exist", c.Params.Get("GroupId"))
	}
	var rules []Rule
	for i := 1; ; i++ {
		prefix := "IpPermissions." + strconv.Itoa(i)
		proto, ok := c.Params[prefix+".IpProtocol"]
		if !ok {
			break
		}
		from, _ := strconv.Atoi(c.Params.Get(prefix + ".FromPort"))
		to, _ := strconv.Atoi(c.Params.Get(prefix + ".ToPort"))
		for j := 1; ; j++ {
			cidr, ok := c.Params[prefix+".IpRanges."+strconv.Itoa(j)+".CidrIp"]
			if !ok {
				break
			}
			rule := Rule{proto[0], from, to, cidr[0]}
			if slices.Contains(g.Ingress, rule) {
				return nil, apiErr("InvalidPermission.Duplicate", "the specified rule already exists")
			}
			rules = append(rules, rule)
		}
	}
	if len(rules) == 0 {
		return nil, apiErr("MissingParameter", "no IP permissions")
	}
	g.Ingress = append(g.Ingress, rules...)
	return okResponse("AuthorizeSecurityGroupIngress"), nil
}

func (s *Server) deleteSecurityGroup(r *region, c Call) (any, *APIError) {
	id := c.Params.Get("GroupId")
	if r.groups[id] == nil {
		return nil, apiErr("InvalidGroup.NotFound", "the security group %q does not exist", id)
	}
	for _, in := range r.instances {
		if in.State != "terminated" && slices.Contains(in.Groups, id) {
			return nil, apiErr("DependencyViolation", "resource %s has a dependent object", id)
		}
	}
	delete(r.groups, id)
	return okResponse("DeleteSecurityGroup"), nil
}

type stateXML struct {
	Code int    `xml:"code"`
	Name string `xml:"name"`
}

var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

type groupRefXML struct {
	ID string `xml:"groupId"`
}

type instanceXML struct {
	ID           string        `xml:"instanceId"`
	ImageID      string        `xml:"imageId"`
	State        stateXML      `xml:"instanceState"`
	InstanceType string        `xml:"instanceType"`
	KeyName      string        `xml:"keyName,omitempty"`
	LaunchTime   string        `xml:"launchTime"`
	PublicIP     string        `xml:"ipAddress,omitempty"`
	ClientToken  string        `xml:"clientToken,omitempty"`
	Lifecycle    string        `xml:"instanceLifecycle,omitempty"`
	VPC          string        `xml:"vpcId"`
	Groups       []groupRefXML `xml:"groupSet>item"`
	Tags         []xmlTag      `xml:"tagSet>item"`
}

func toXML(in *Instance) instanceXML {
	x := instanceXML{
		ID: in.ID, ImageID: in.ImageID, State: stateXML{stateCodes[in.State], in.State},
		InstanceType: in.InstanceType, KeyName: in.KeyName, LaunchTime: in.LaunchTime.Format("2006-01-02T15:04:05.000Z"),
		PublicIP: in.PublicIP, ClientToken: in.ClientToken, Lifecycle: in.Lifecycle, VPC: DefaultVPC, Tags: xmlTags(in.Tags),
	}
	for _, g := range in.Groups {
		x.Groups = append(x.Groups, groupRefXML{g})
	}
	return x
}

type runResponse struct {
	XMLName       xml.Name      `xml:"RunInstancesResponse"`
	Xmlns         string        `xml:"xmlns,attr"`
	ReservationID string        `xml:"reservationId"`
	OwnerID       string        `xml:"ownerId"`
	Instances     []instanceXML `xml:"instancesSet>item"`
	fresh         bool
}

func (s *Server) runInstances(r *region, c Call) (any, *APIError) {
	p := c.Params
	token := p.Get("ClientToken")
	market := p.Get("InstanceMarketOptions.MarketType")
	if token != "" {
		for _, in := range sortedValues(r.instances) {
			if in.ClientToken != token {
				continue
			}
			if in.ImageID != p.Get("ImageId") || in.InstanceType != p.Get("InstanceType") || (in.Lifecycle == "spot") != (market == "spot") {
				return nil, apiErr("IdempotentParameterMismatch", "client token %q was used with different parameters", token)
			}
			return runResponse{Xmlns: xmlns, ReservationID: "r-fake", OwnerID: "000000000000", Instances: []instanceXML{toXML(in)}}, nil
		}
	}
	switch {
	case p.Get("ImageId") == "" || p.Get("InstanceType") == "":
		return nil, apiErr("MissingParameter", "ImageId and InstanceType are required")
	case p.Get("MinCount") != "1" || p.Get("MaxCount") != "1":
		return nil, apiErr("InvalidParameterValue", "the fake launches exactly one instance")
	case r.image(p.Get("ImageId")) == nil:
		return nil, apiErr("InvalidAMIID.NotFound", "the image id %q does not exist", p.Get("ImageId"))
	case r.image(p.Get("ImageId")).State != "available":
		return nil, apiErr("InvalidAMIID.Unavailable", "the image id %q is not available", p.Get("ImageId"))
	}
	keyName := p.Get("KeyName")
	if keyName != "" && !slices.ContainsFunc(sortedValues(r.keys), func(k *KeyPair) bool { return k.Name == keyName }) {
		return nil, apiErr("InvalidKeyPair.NotFound", "the key pair %q does not exist", keyName)
	}
	groups := list(p, "SecurityGroupId")
	for _, g := range groups {
		if r.groups[g] == nil {
			return nil, apiErr("InvalidGroup.NotFound", "the security group %q does not exist", g)
		}
	}
	in := &Instance{
		ID: s.newID("i-"), Region: c.Region, ImageID: p.Get("ImageId"), InstanceType: p.Get("InstanceType"),
		KeyName: keyName, Groups: groups, State: "pending", ClientToken: token,
		Shutdown: p.Get("InstanceInitiatedShutdownBehavior"), UserData: decodeUserData(p.Get("UserData")),
		Tags: tagSpecs(p, "instance"), LaunchTime: s.now().UTC().Truncate(time.Second),
	}
	if market == "spot" {
		in.Lifecycle = "spot"
	}
	size, _ := strconv.Atoi(p.Get("BlockDeviceMapping.1.Ebs.VolumeSize"))
	vol := &Volume{ID: s.newID("vol-"), Instance: in.ID, Region: c.Region, SizeGB: size, Tags: tagSpecs(p, "volume")}
	in.VolumeID = vol.ID
	r.instances[in.ID], r.volumes[vol.ID] = in, vol
	in.pendingLeft = s.pending
	return runResponse{Xmlns: xmlns, ReservationID: "r-fake", OwnerID: "000000000000", Instances: []instanceXML{toXML(in)}, fresh: true}, nil
}

func (s *Server) describeInstances(r *region, c Call) (any, *APIError) {
	type reservationXML struct {
		ID        string        `xml:"reservationId"`
		OwnerID   string        `xml:"ownerId"`
		Instances []instanceXML `xml:"instancesSet>item"`
	}
	ids, fs := list(c.Params, "InstanceId"), filters(c.Params)
	for _, id := range ids {
		if r.instances[id] == nil {
			return nil, apiErr("InvalidInstanceID.NotFound", "the instance ID %q does not exist", id)
		}
	}
	var out []reservationXML
	for _, in := range sortedValues(r.instances) {
		attr := func(name string) []string {
			if v, ok := tagAttr(in.Tags, name); ok {
				return v
			}
			return map[string][]string{
				"instance-id": {in.ID}, "instance-state-name": {in.State}, "key-name": {in.KeyName},
				"client-token": {in.ClientToken}, "image-id": {in.ImageID}, "instance-type": {in.InstanceType},
			}[name]
		}
		if (len(ids) > 0 && !slices.Contains(ids, in.ID)) || !matches(fs, attr) {
			continue
		}
		if in.State == "pending" {
			if in.pendingLeft > 0 {
				in.pendingLeft--
			} else {
				in.State, in.PublicIP = "running", in.Address
			}
		}
		out = append(out, reservationXML{ID: "r-fake", OwnerID: "000000000000", Instances: []instanceXML{toXML(in)}})
	}
	return struct {
		XMLName      xml.Name         `xml:"DescribeInstancesResponse"`
		Xmlns        string           `xml:"xmlns,attr"`
		Reservations []reservationXML `xml:"reservationSet>item"`
	}{Xmlns: xmlns, Reservations: out}, nil
}

type changeXML struct {
	ID       string   `xml:"instanceId"`
	Current  stateXML `xml:"currentState"`
	Previous stateXML `xml:"previousState"`
}

type terminateResponse struct {
	XMLName   xml.Name    `xml:"TerminateInstancesResponse"`
	Xmlns     string      `xml:"xmlns,attr"`
	Instances []changeXML `xml:"instancesSet>item"`
}

func (s *Server) terminateInstances(r *region, c Call) (any, *APIError) {
	ids := list(c.Params, "InstanceId")
	for _, id := range ids {
		if r.instances[id] == nil {
			return nil, apiErr("InvalidInstanceID.NotFound", "the instance ID %q does not exist", id)
		}
	}
	var out []changeXML
	for _, id := range ids {
		in := r.instances[id]
		prev := in.State
		in.State, in.PublicIP = "terminated", ""
		delete(r.volumes, in.VolumeID)
		out = append(out, changeXML{id, stateXML{48, "terminated"}, stateXML{stateCodes[prev], prev}})
	}
	return terminateResponse{Xmlns: xmlns, Instances: out}, nil
}

func (s *Server) createTags(r *region, c Call) (any, *APIError) {
	ids := list(c.Params, "ResourceId")
	tags := map[string]string{}
	for i := 1; ; i++ {
		k, ok := c.Params["Tag."+strconv.Itoa(i)+".Key"]
		if !ok {
			break
		}
		tags[k[0]] = c.Params.Get("Tag." + strconv.Itoa(i) + ".Value")
	}
	for _, id := range ids {
		if r.instances[id] == nil && r.volumes[id] == nil && r.groups[id] == nil && r.keys[id] == nil && r.snapshots[id] == nil && r.image(id) == nil {
			return nil, apiErr("InvalidID", "the ID %q is not valid", id)
		}
	}
	for _, id := range ids {
		for k, v := range tags {
			s.setTag(r, id, k, v)
		}
	}
	return okResponse("CreateTags"), nil
}

func sortedValues[T any](m map[string]*T) []*T {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*T, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}
