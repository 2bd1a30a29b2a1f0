package fakeec2

import (
	"encoding/xml"
	"net/http"
	"slices"
	"time"
)

// Images and snapshots, as the EC2 API reference describes CreateImage,
// DescribeImages, DeregisterImage, DescribeSnapshots and DeleteSnapshot.
// Every handler runs with s.mu held.

// image returns the image id of the region, or nil. s.mu is held.
func (r *region) image(id string) *Image {
	for i := range r.images {
		if r.images[i].ID == id {
			return &r.images[i]
		}
	}
	return nil
}

type createImageResponse struct {
	XMLName   xml.Name `xml:"CreateImageResponse"`
	Xmlns     string   `xml:"xmlns,attr"`
	RequestID string   `xml:"requestId"`
	ID        string   `xml:"imageId"`
	instance  string
}

// createImage makes an image of an instance's root volume: one snapshot,
// tagged with the "snapshot" tag specification, and the image, tagged
// with the "image" one, pending until the next DescribeImages.
func (s *Server) createImage(r *region, c Call) (any, *APIError) {
	p := c.Params
	id, name := p.Get("InstanceId"), p.Get("Name")
	in := r.instances[id]
	switch {
	case id == "" || name == "":
		return nil, apiErr("MissingParameter", "InstanceId and Name are required")
	case in == nil || in.State == "terminated":
		return nil, apiErr("InvalidInstanceID.NotFound", "the instance ID %q does not exist", id)
	case in.State != "running" && in.State != "stopped":
		return nil, apiErr("IncorrectInstanceState", "the instance %q is %s", id, in.State)
	}
	for _, im := range r.images {
		if im.Owner == Account && im.Name == name {
			return nil, apiErr("InvalidAMIName.Duplicate", "AMI name %s is already in use by AMI %s", name, im.ID)
		}
	}
	now := s.now().UTC().Truncate(time.Second)
	size := 8
	if v := r.volumes[in.VolumeID]; v != nil && v.SizeGB > 0 {
		size = v.SizeGB
	}
	snap := &Snapshot{ID: s.newID("snap-"), Region: c.Region, Volume: in.VolumeID, SizeGB: size, Tags: tagSpecs(p, "snapshot"), Created: now}
	r.snapshots[snap.ID] = snap
	r.images = append(r.images, Image{
		ID: s.newID("ami-"), Name: name, Owner: Account, Architecture: "x86_64", State: "pending", Created: now,
		Instance: id, Tags: tagSpecs(p, "image"), Snapshots: []string{snap.ID}, pendingLeft: 1,
	})
	return createImageResponse{Xmlns: xmlns, RequestID: "fake-request", ID: r.images[len(r.images)-1].ID, instance: id}, nil
}

// imaged runs the Image hook for a new image; when it fails, the image and
// its snapshots are removed again.
func (s *Server) imaged(regionName, instanceID, imageID string, hooks Hooks) *APIError {
	if hooks.Image == nil {
		return nil
	}
	in, _ := s.Instance(regionName, instanceID)
	if err := hooks.Image(in, imageID); err != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		r := s.region(regionName)
		if im := r.image(imageID); im != nil {
			for _, sn := range im.Snapshots {
				delete(r.snapshots, sn)
			}
		}
		r.images = slices.DeleteFunc(r.images, func(im Image) bool { return im.ID == imageID })
		return &APIError{Status: http.StatusInternalServerError, Code: "InternalError", Message: "image hook: " + err.Error()}
	}
	return nil
}

type ebsXML struct {
	SnapshotID string `xml:"snapshotId"`
	VolumeSize int    `xml:"volumeSize"`
	Delete     bool   `xml:"deleteOnTermination"`
	VolumeType string `xml:"volumeType"`
	Encrypted  bool   `xml:"encrypted"`
}

type mappingXML struct {
	Device string  `xml:"deviceName"`
	EBS    *ebsXML `xml:"ebs,omitempty"`
}

type imageXML struct {
	ID           string       `xml:"imageId"`
	Name         string       `xml:"name"`
	Owner        string       `xml:"imageOwnerId"`
	Architecture string       `xml:"architecture"`
	State        string       `xml:"imageState"`
	Created      string       `xml:"creationDate"`
	RootDevice   string       `xml:"rootDeviceName"`
	RootType     string       `xml:"rootDeviceType"`
	Mappings     []mappingXML `xml:"blockDeviceMapping>item"`
	Tags         []xmlTag     `xml:"tagSet>item,omitempty"`
}

// describeImages answers DescribeImages. Owner "self" is the fake's
// account; a named image that does not exist is an error.
func (s *Server) describeImages(r *region, c Call) (any, *APIError) {
	owners, ids, fs := list(c.Params, "Owner"), list(c.Params, "ImageId"), filters(c.Params)
	for i, o := range owners {
		if o == "self" {
			owners[i] = Account
		}
	}
	for _, id := range ids {
		if r.image(id) == nil {
			return nil, apiErr("InvalidAMIID.NotFound", "the image id %q does not exist", id)
		}
	}
	var out []imageXML
	for i := range r.images {
		im := &r.images[i]
		attr := func(name string) []string {
			if v, ok := tagAttr(im.Tags, name); ok {
				return v
			}
			return map[string][]string{
				"name": {im.Name}, "architecture": {im.Architecture}, "state": {im.State},
				"image-id": {im.ID}, "owner-id": {im.Owner},
			}[name]
		}
		if (len(owners) > 0 && !slices.Contains(owners, im.Owner)) || (len(ids) > 0 && !slices.Contains(ids, im.ID)) || !matches(fs, attr) {
			continue
		}
		if im.State == "pending" && im.Owner == Account {
			if im.pendingLeft > 0 {
				im.pendingLeft--
			} else {
				im.State = "available"
			}
		}
		x := imageXML{
			ID: im.ID, Name: im.Name, Owner: im.Owner, Architecture: im.Architecture, State: im.State,
			Created: im.Created.Format("2006-01-02T15:04:05.000Z"), RootDevice: "/dev/sda1", RootType: "ebs", Tags: xmlTags(im.Tags),
		}
		for _, sn := range im.Snapshots {
			size := 0
			if v := r.snapshots[sn]; v != nil {
				size = v.SizeGB
			}
			x.Mappings = append(x.Mappings, mappingXML{Device: "/dev/sda1", EBS: &ebsXML{SnapshotID: sn, VolumeSize: size, Delete: true, VolumeType: "gp3", Encrypted: true}})
		}
		out = append(out, x)
	}
	return struct {
		XMLName xml.Name   `xml:"DescribeImagesResponse"`
		Xmlns   string     `xml:"xmlns,attr"`
		Images  []imageXML `xml:"imagesSet>item"`
	}{Xmlns: xmlns, Images: out}, nil
}

// deregisterImage removes an image and keeps its snapshots, as EC2 does
// unless DeleteAssociatedSnapshots is set.
func (s *Server) deregisterImage(r *region, c Call) (any, *APIError) {
	id := c.Params.Get("ImageId")
	im := r.image(id)
	if im == nil {
		return nil, apiErr("InvalidAMIID.NotFound", "the image id %q does not exist", id)
	}
	if im.Owner != Account {
		return nil, apiErr("AuthFailure", "not authorized for image %s", id)
	}
	if c.Params.Get("DeleteAssociatedSnapshots") == "true" {
		for _, sn := range im.Snapshots {
			delete(r.snapshots, sn)
		}
	}
	r.images = slices.DeleteFunc(r.images, func(im Image) bool { return im.ID == id })
	return okResponse("DeregisterImage"), nil
}

func (s *Server) describeSnapshots(r *region, c Call) (any, *APIError) {
	type snapshotXML struct {
		ID       string   `xml:"snapshotId"`
		Volume   string   `xml:"volumeId"`
		State    string   `xml:"status"`
		Size     int      `xml:"volumeSize"`
		Owner    string   `xml:"ownerId"`
		Started  string   `xml:"startTime"`
		Progress string   `xml:"progress"`
		Tags     []xmlTag `xml:"tagSet>item,omitempty"`
	}
	owners, ids, fs := list(c.Params, "Owner"), list(c.Params, "SnapshotId"), filters(c.Params)
	for _, id := range ids {
		if r.snapshots[id] == nil {
			return nil, apiErr("InvalidSnapshot.NotFound", "the snapshot %q does not exist", id)
		}
	}
	var out []snapshotXML
	for _, sn := range sortedValues(r.snapshots) {
		attr := func(name string) []string {
			if v, ok := tagAttr(sn.Tags, name); ok {
				return v
			}
			return map[string][]string{"snapshot-id": {sn.ID}, "volume-id": {sn.Volume}, "owner-id": {Account}, "status": {"completed"}}[name]
		}
		if (len(owners) > 0 && !slices.ContainsFunc(owners, func(o string) bool { return o == "self" || o == Account })) ||
			(len(ids) > 0 && !slices.Contains(ids, sn.ID)) || !matches(fs, attr) {
			continue
		}
		out = append(out, snapshotXML{sn.ID, sn.Volume, "completed", sn.SizeGB, Account, sn.Created.Format("2006-01-02T15:04:05.000Z"), "100%", xmlTags(sn.Tags)})
	}
	return struct {
		XMLName   xml.Name      `xml:"DescribeSnapshotsResponse"`
		Xmlns     string        `xml:"xmlns,attr"`
		Snapshots []snapshotXML `xml:"snapshotSet>item"`
	}{Xmlns: xmlns, Snapshots: out}, nil
}

// deleteSnapshot fails for a snapshot a registered image uses, as EC2 does.
func (s *Server) deleteSnapshot(r *region, c Call) (any, *APIError) {
	id := c.Params.Get("SnapshotId")
	if r.snapshots[id] == nil {
		return nil, apiErr("InvalidSnapshot.NotFound", "the snapshot %q does not exist", id)
	}
	for _, im := range r.images {
		if slices.Contains(im.Snapshots, id) {
			return nil, apiErr("InvalidSnapshot.InUse", "the snapshot %s is currently in use by %s", id, im.ID)
		}
	}
	delete(r.snapshots, id)
	return okResponse("DeleteSnapshot"), nil
}
