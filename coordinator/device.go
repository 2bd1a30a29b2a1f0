package coordinator

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/github"
	"golang.org/x/crypto/hkdf"
	"golang.org/x/oauth2"
)

// DefaultDeviceTokenTTL is the lifetime of a user token issued through the
// device flow (crabbox login), unless Config.DeviceTokenTTL says otherwise.
const DefaultDeviceTokenTTL = 30 * 24 * time.Hour

// TokenSourceDevice is the source of tokens issued through the device flow.
const TokenSourceDevice = "github-device"

// DefaultMaxDeviceSignIns bounds the device-flow requests (which need no
// token and each ask GitHub) that a Server works on at once, unless
// Config.MaxDeviceSignIns says otherwise.
const DefaultMaxDeviceSignIns = 8

// deviceSlot takes one of the device flow's slots; ok is false when all
// are taken (the caller answers 429). release gives it back.
func (s *Server) deviceSlot() (release func(), ok bool) {
	select {
	case s.deviceSlots <- struct{}{}:
		return func() { <-s.deviceSlots }, true
	default:
		return nil, false
	}
}

// busy is the answer to a device-flow request while every slot is taken.
func busy() *apiError {
	return errorf(http.StatusTooManyRequests, api.CodeTooManyRequests, "too many GitHub sign-ins in progress; try again in a few seconds")
}

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
	release, ok := s.deviceSlot()
	if !ok {
		return busy()
	}
	defer release()
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
	release, ok := s.deviceSlot()
	if !ok {
		return busy()
	}
	defer release()
	tok, err := s.github.PollDevice(r.Context(), req.DeviceCode)
	var rejected *github.RejectedError
	switch {
	case errors.Is(err, github.ErrPending):
		writeJSON(w, http.StatusAccepted, api.DevicePending{Status: api.DevicePendingStatus})
		return nil
	case errors.Is(err, github.ErrSlowDown):
		writeJSON(w, http.StatusAccepted, api.DevicePending{Status: api.DeviceSlowDownStatus})
		return nil
	case errors.Is(err, github.ErrDeviceExpired):
		return errorf(http.StatusGone, api.CodeDeviceExpired, "GitHub says the sign-in code expired (expired_token); start again")
	case errors.Is(err, github.ErrAccessDenied):
		return forbidden("the sign-in was declined at GitHub (access_denied)")
	case errors.As(err, &rejected):
		return errorf(http.StatusBadRequest, api.CodeDeviceCodeRejected, "%s", rejected.Reason())
	case errors.Is(err, github.ErrAppRefused):
		s.log.Warn("GitHub device poll", "err", err)
		return errorf(http.StatusBadGateway, api.CodeUpstream, "GitHub refused this coordinator's OAuth app (%s); ask the coordinator's admin", strings.TrimPrefix(err.Error(), github.ErrAppRefused.Error()+": "))
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
	token, expires, err := s.issueUserToken(r.Context(), user.Login, user.Org, user.Login, TokenSourceDevice, s.deviceTTL, tok.AccessToken)
	if err != nil {
		return s.internal(r, "issuing a token", err)
	}
	writeJSON(w, http.StatusOK, api.DeviceToken{
		Token: token, Owner: user.Login, Org: user.Org, Login: user.Login, ExpiresAt: expires.UTC(),
	})
	return nil
}

// DefaultTokenRecheckInterval is how often the user of a token from a
// GitHub sign-in is checked again, unless Config.TokenRecheckInterval says
// otherwise: a user removed from the org, or whose GitHub credential was
// revoked, loses the token within about this (plus a maintenance pass).
const DefaultTokenRecheckInterval = 10 * time.Minute

// tokenCheckBatch bounds the tokens one maintenance pass checks.
const tokenCheckBatch = 50

// credentialSealer seals GitHub credentials kept in the token registry
// with a key derived from the session secret, so the database alone does
// not give them away.
func newCredentialSealer(secret []byte) (cipher.AEAD, error) {
	key := make([]byte, 32)
	if _, err := io.ReadFull(hkdf.New(sha256.New, secret, nil, []byte("crabbox github credential v1")), key); err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// sealCredential seals the GitHub credential of token id.
func (s *Server) sealCredential(id, credential string) (string, error) {
	nonce := make([]byte, s.sealer.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(s.sealer.Seal(nonce, nonce, []byte(credential), []byte(id))), nil
}

// openCredential opens what sealCredential sealed for token id.
func (s *Server) openCredential(id, sealed string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(raw) < s.sealer.NonceSize() {
		return "", errors.New("sealed credential is malformed")
	}
	plain, err := s.sealer.Open(nil, raw[:s.sealer.NonceSize()], raw[s.sealer.NonceSize():], []byte(id))
	if err != nil {
		return "", errors.New("sealed credential does not open (another session secret?)")
	}
	return string(plain), nil
}

// recheckTokens checks again the users of the tokens from GitHub sign-ins
// whose last check is older than the recheck interval, and revokes the
// tokens of those GitHub no longer allows. A GitHub that does not answer
// leaves a token as it is, to be checked at the next pass.
func (s *Server) recheckTokens(ctx context.Context) {
	if s.github == nil || s.sealer == nil {
		return
	}
	now := s.clock.Now().UTC()
	due, err := s.store.DueTokenChecks(ctx, now.Add(-s.recheckInterval), now, tokenCheckBatch)
	if err != nil {
		s.log.Warn("token checks", "err", err)
		return
	}
	for _, t := range due {
		log := s.log.With(slog.String("token", t.ID), slog.String("owner", t.Owner))
		credential, err := s.openCredential(t.ID, t.GitHub)
		if err == nil {
			err = s.github.Check(ctx, &oauth2.Token{AccessToken: credential}, t.Login, t.Org)
		}
		switch {
		case errors.Is(err, github.ErrDenied):
			if _, err := s.store.RevokeToken(ctx, t.ID, "github: "+github.DeniedReason(err), now); err != nil {
				log.Warn("revoke token after GitHub check", "err", err)
				continue
			}
			s.addRevoked(t.ID)
			log.Info("token revoked: GitHub no longer allows its user", "reason", github.DeniedReason(err))
		case err != nil:
			log.Warn("GitHub check of a token's user", "err", err)
		default:
			if err := s.store.MarkTokenChecked(ctx, t.ID, now); err != nil {
				log.Warn("mark token checked", "err", err)
			}
		}
	}
}
