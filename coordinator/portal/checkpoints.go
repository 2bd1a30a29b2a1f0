package portal

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	coordclient "github.com/crabbox-dev/crabbox/coordinator/client"
)

// checkpointStates are the states the checkpoints page filters by.
var checkpointStates = []api.CheckpointState{api.CheckpointCreating, api.CheckpointReady, api.CheckpointDeleting, api.CheckpointDeleted, api.CheckpointFailed}

type checkpointsData struct {
	Checkpoints []api.Checkpoint
	State       string
	States      []api.CheckpointState
}

// checkpoints lists the user's native checkpoints.
func (p *Portal) checkpoints(w http.ResponseWriter, r *http.Request, v *view) {
	state := r.URL.Query().Get("state")
	if state != "" && !slices.Contains(checkpointStates, api.CheckpointState(state)) {
		p.fail(w, r, v, http.StatusBadRequest, "Unknown checkpoint state.")
		return
	}
	cps, err := v.cl.ListCheckpoints(r.Context(), coordclient.ListCheckpointsOptions{State: api.CheckpointState(state)})
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	p.render(w, http.StatusOK, v, "checkpoints", page{Title: "Checkpoints", Data: checkpointsData{Checkpoints: cps, State: state, States: checkpointStates}})
}

type checkpointData struct {
	Checkpoint api.Checkpoint
	Events     []api.CheckpointEvent
}

// UnusedHours is the unused expiry in hours, for the retention form.
func (d checkpointData) UnusedHours() int64 {
	return d.Checkpoint.Retention.UnusedExpirySeconds / 3600
}

// Changeable reports whether the checkpoint's retention can change.
func (d checkpointData) Changeable() bool {
	s := d.Checkpoint.State
	return s == api.CheckpointCreating || s == api.CheckpointReady
}

// GB is the artifact's size in GB.
func (d checkpointData) GB() string {
	return fmt.Sprintf("%.2f GB", float64(d.Checkpoint.SizeBytes)/1e9)
}

// checkpoint shows one checkpoint with its recent events, its retention
// form and its delete button.
func (p *Portal) checkpoint(w http.ResponseWriter, r *http.Request, v *view) {
	id := r.PathValue("id")
	if !api.IsCheckpointID(id) {
		p.fail(w, r, v, http.StatusNotFound, "No such checkpoint.")
		return
	}
	cp, err := v.cl.GetCheckpoint(r.Context(), id)
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	events, err := v.cl.CheckpointEvents(r.Context(), id, 0, 0)
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	slices.Reverse(events) // newest first
	pg := page{Title: "Checkpoint " + cp.ID, Data: checkpointData{Checkpoint: cp, Events: events}}
	switch r.URL.Query().Get("done") {
	case "retention":
		pg.Flash = "Retention changed."
	case "deleted":
		pg.Flash = "Deletion requested: the artifact is deleted shortly."
	}
	p.render(w, http.StatusOK, v, "checkpoint", pg)
}

// maxRetentionHours bounds the unused expiry the form takes.
const maxRetentionHours = api.MaxUnusedExpirySeconds / 3600

// checkpointRetention changes a checkpoint's retention: a POST with the
// session's CSRF token, mode manual or unused (with hours).
func (p *Portal) checkpointRetention(w http.ResponseWriter, r *http.Request, v *view) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if !p.checkPost(r, v.s) {
		p.fail(w, r, v, http.StatusForbidden, "The form expired or came from another site; reload the page and try again.")
		return
	}
	id := r.PathValue("id")
	ret := api.CheckpointRetention{Mode: r.PostFormValue("mode")}
	switch ret.Mode {
	case api.RetentionManual:
	case api.RetentionUnused:
		hours, err := strconv.ParseInt(strings.TrimSpace(r.PostFormValue("hours")), 10, 64)
		if err != nil || hours < 1 || hours > maxRetentionHours {
			p.fail(w, r, v, http.StatusBadRequest, fmt.Sprintf("Give the hours unused before deletion: a whole number from 1 to %d.", maxRetentionHours))
			return
		}
		ret.UnusedExpirySeconds = hours * 3600
	default:
		p.fail(w, r, v, http.StatusBadRequest, "Choose manual retention or deletion after a time unused.")
		return
	}
	if _, err := v.cl.SetCheckpointRetention(r.Context(), id, ret); err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	http.Redirect(w, r, Prefix+"/checkpoints/"+url.PathEscape(id)+"?done=retention", http.StatusSeeOther)
}

// deleteCheckpointPage asks before a deletion; its form is the confirmed
// POST.
func (p *Portal) deleteCheckpointPage(w http.ResponseWriter, r *http.Request, v *view) {
	cp, err := v.cl.GetCheckpoint(r.Context(), r.PathValue("id"))
	if err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	p.confirmDelete(w, r, v, cp)
}

func (p *Portal) confirmDelete(w http.ResponseWriter, r *http.Request, v *view, cp api.Checkpoint) {
	if cp.State != api.CheckpointReady {
		p.fail(w, r, v, http.StatusConflict, fmt.Sprintf("Checkpoint %s is %s.", cp.ID, cp.State))
		return
	}
	p.render(w, http.StatusOK, v, "checkpoint_delete", page{Title: "Delete " + cp.ID + "?", Data: cp})
}

// deleteCheckpoint queues a checkpoint's deletion once the user confirmed
// it: a POST with the session's CSRF token and confirm=yes; without the
// confirmation it asks (again).
func (p *Portal) deleteCheckpoint(w http.ResponseWriter, r *http.Request, v *view) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if !p.checkPost(r, v.s) {
		p.fail(w, r, v, http.StatusForbidden, "The form expired or came from another site; reload the page and try again.")
		return
	}
	id := r.PathValue("id")
	if r.PostFormValue("confirm") != "yes" {
		cp, err := v.cl.GetCheckpoint(r.Context(), id)
		if err != nil {
			p.apiFail(w, r, v, err)
			return
		}
		p.confirmDelete(w, r, v, cp)
		return
	}
	if _, err := v.cl.DeleteCheckpoint(r.Context(), id); err != nil {
		p.apiFail(w, r, v, err)
		return
	}
	http.Redirect(w, r, Prefix+"/checkpoints/"+url.PathEscape(id)+"?done=deleted", http.StatusSeeOther)
}
