package docker

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/crabbox-dev/crabbox/internal/atomicfile"
)

// A box's lease record lives in its container, where the agent reads its
// expiry; reading it out costs the engine a chrooted tar of the running
// container (tens of milliseconds, more on a busy engine), too much for
// every warm run. So the backend keeps what it last wrote into or read out
// of each box: in memory, and, with a state directory, in
// <StateDir>/records/<leaseID>.json for the next process. Resolve and List
// take the expiry from there (the host key from the box's label), and
// Touch rewrites the cached record instead of reading it out first.
//
// The cache is right as long as the only writers of a box's record are
// its agent, which writes it once before it announces that it serves,
// and the Touches of the clients that hold the lease, which share the
// state directory where the lease's claim lives. An entry counts only for
// the container it was made for; Cleanup still reads the record out of
// the box, so what it deletes it decides on from the box itself.

// cachedRecord is what the backend last knew of a box's lease record.
type cachedRecord struct {
	ContainerID string    `json:"container"`
	ExpiresAt   time.Time `json:"expiresAt"`
	// Record is the record's content as last read or written after the
	// agent started; nil when only the expiry is known (just acquired:
	// the agent adds to the record as it starts).
	Record []byte `json:"record,omitempty"`
}

func (b *Backend) recordFile(leaseID string) string {
	if b.cfg.StateDir == "" {
		return ""
	}
	return filepath.Join(b.cfg.StateDir, "records", leaseID+".json")
}

// cacheRecord keeps what is known of x's record: its expiry and, when not
// nil, its content. Failing to keep it only costs time later.
func (b *Backend) cacheRecord(x box, expires time.Time, record []byte) {
	c := cachedRecord{ContainerID: x.containerID, ExpiresAt: expires.UTC(), Record: record}
	b.recordsMu.Lock()
	if b.records == nil {
		b.records = map[string]cachedRecord{}
	}
	b.records[x.leaseID()] = c
	b.recordsMu.Unlock()
	name := b.recordFile(x.leaseID())
	if name == "" {
		return
	}
	data, err := json.Marshal(c)
	if err == nil {
		err = atomicfile.WriteCache(name, data)
	}
	if err != nil {
		b.rt.Logger.Debug("docker lease record not cached", "lease", x.leaseID(), "err", err)
	}
}

// cachedRecordOf returns what is known of x's record, if anything is
// known of that container.
func (b *Backend) cachedRecordOf(x box) (cachedRecord, bool) {
	b.recordsMu.Lock()
	c, ok := b.records[x.leaseID()]
	b.recordsMu.Unlock()
	if !ok {
		name := b.recordFile(x.leaseID())
		if name == "" {
			return cachedRecord{}, false
		}
		data, err := os.ReadFile(name)
		if err != nil || json.Unmarshal(data, &c) != nil {
			return cachedRecord{}, false
		}
	}
	if c.ContainerID != x.containerID || c.ExpiresAt.IsZero() {
		return cachedRecord{}, false
	}
	return c, true
}

// forgetRecord drops what is known of lease id's record.
func (b *Backend) forgetRecord(id string) {
	b.recordsMu.Lock()
	delete(b.records, id)
	b.recordsMu.Unlock()
	if name := b.recordFile(id); name != "" {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			b.rt.Logger.Debug("docker lease record cache not removed", "lease", id, "err", err)
		}
	}
}
