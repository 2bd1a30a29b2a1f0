package coordinator

import (
	"errors"
	"net/http"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/github"
)

// DefaultDeviceTokenTTL is the lifetime of a user token issued through the
// device flow (crabbox login), unless Config.DeviceTokenTTL says otherwise.
const DefaultDeviceTokenTTL = 30 * 24 * time.Hour

// TokenSourceDevice is the source of tokens issued through the device flow.
const TokenSourceDevice = "github-device"

// unauthed wraps a route that needs no bearer token (the device flow's
// sign-in itself).
func (s *Server) unauthed(h func(http.ResponseWriter, *http.Request) *apiError) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := h(w, r); e != nil {
			writeError(w, e)
		}
	})
}

// deviceStart serves POST /v1/auth/device: it starts a GitHub device-flow
// sign-in and tells the client the code the user enters at GitHub.
func (s *Server) deviceStart(w http.ResponseWriter, r *http.Request) *apiError {
	if s.github == nil || s.secret == nil {
		return notFound("GitHub sign-in is not configured on this coordinator")
	}
	if e := decodeBody(w, r, s.maxBody, true, &struct{}{}); e != nil {
		return e
	}
	d, err := s.github.StartDevice(r.Context())
	if err != nil {
		s.log.Warn("GitHub device sign-in", "err", err)
		return errorf(http.StatusBadGateway, api.CodeUpstream, "GitHub did not start the sign-in; try again")
	}
	writeJSON(w, http.StatusOK, api.DeviceStart{
		DeviceCode: d.DeviceCode, UserCode: d.UserCode, VerificationURI: d.VerificationURI,
		ExpiresAt: d.ExpiresAt, IntervalSeconds: int(d.Interval / time.Second),
	})
	return nil
}

// deviceToken serves POST /v1/auth/device/token: it asks GitHub once
// whether the sign-in of the device code is done and, when it is and the
// user may use the coordinator, issues and records a user token.
func (s *Server) deviceToken(w http.ResponseWriter, r *http.Request) *apiError {
	if s.github == nil || s.secret == nil {
		return notFound("GitHub sign-in is not configured on this coordinator")
	}
	var req api.DeviceTokenRequest
	if e := decodeBody(w, r, s.maxBody, false, &req); e != nil {
		return e
	}
	if req.DeviceCode == "" || len(req.DeviceCode) > 256 {
		return invalid("field %q is required (at most 256 bytes)", "deviceCode")
	}
	tok, err := s.github.PollDevice(r.Context(), req.DeviceCode)
	switch {
	case errors.Is(err, github.ErrPending):
		writeJSON(w, http.StatusAccepted, api.DevicePending{Status: api.DevicePendingStatus})
		return nil
	case errors.Is(err, github.ErrSlowDown):
		writeJSON(w, http.StatusAccepted, api.DevicePending{Status: api.DeviceSlowDownStatus})
		return nil
	case errors.Is(err, github.ErrDeviceExpired):
		return errorf(http.StatusGone, api.CodeDeviceExpired, "the sign-in code expired; start again")
	case errors.Is(err, github.ErrAccessDenied):
		return forbidden("the sign-in was declined at GitHub")
	case err != nil:
		s.log.Warn("GitHub device poll", "err", err)
		return errorf(http.StatusBadGateway, api.CodeUpstream, "GitHub did not answer; try again")
	}
	user, err := s.github.Authorize(r.Context(), tok)
	if errors.Is(err, github.ErrDenied) {
		return forbidden("this GitHub account may not use this coordinator: %s", github.DeniedReason(err))
	}
	if err != nil {
		s.log.Warn("GitHub authorize", "err", err)
		return errorf(http.StatusBadGateway, api.CodeUpstream, "GitHub did not answer; try again")
	}
	token, err := s.IssueUserToken(r.Context(), user.Login, user.Org, user.Login, TokenSourceDevice, s.deviceTTL)
	if err != nil {
		return s.internal(r, "issuing a token", err)
	}
	writeJSON(w, http.StatusOK, api.DeviceToken{
		Token: token, Owner: user.Login, Org: user.Org, Login: user.Login,
		ExpiresAt: s.clock.Now().Truncate(time.Second).Add(s.deviceTTL).UTC(),
	})
	return nil
}
