package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/crabbox-dev/crabbox/coordinator/api"
	"github.com/crabbox-dev/crabbox/coordinator/auth"
	"github.com/crabbox-dev/crabbox/coordinator/store"
)

// RevocationRefresh is how often a Server reloads the set of revoked
// token IDs from the store. A revocation takes effect at once on the
// Server that made it and within about this long on other Servers
// sharing the store.
const RevocationRefresh = time.Second

// Token list limits of GET /v1/tokens and GET /v1/admin/tokens.
const (
	defaultTokenListLimit = 200
	maxTokenListLimit     = 1000
)

// revocations is a Server's in-memory copy of the revoked token IDs, so
// checking a request's token costs a map lookup: the set is reloaded from
// the store by at most one request at a time, when it is older than
// RevocationRefresh.
type revocations struct {
	// mu is held while the set is reloaded or added to, so an ID added
	// after a revocation commits is never lost to a reload that read the
	// store before it.
	mu     sync.Mutex
	set    atomic.Pointer[map[string]struct{}]
	loaded atomic.Int64 // UnixNano of the last reload, by the Server's clock
}

// revoked reports whether token id is revoked at now. It fails only while
// no set was ever loaded and the store cannot be read; later, a store
// that cannot be read leaves the last set in force.
func (s *Server) revoked(ctx context.Context, id string, now time.Time) (bool, error) {
	rv := &s.revocations
	if now.UnixNano()-rv.loaded.Load() >= int64(RevocationRefresh) {
		if rv.set.Load() == nil {
			rv.mu.Lock()
			err := s.reloadRevocations(ctx, now)
			rv.mu.Unlock()
			if err != nil {
				return false, err
			}
		} else if rv.mu.TryLock() {
			if err := s.reloadRevocations(ctx, now); err != nil {
				s.log.Warn("reload revoked tokens", "err", err)
			}
			rv.mu.Unlock()
		}
	}
	_, ok := (*rv.set.Load())[id]
	return ok, nil
}

// reloadRevocations reloads the set; the caller holds the lock.
func (s *Server) reloadRevocations(ctx context.Context, now time.Time) error {
	rv := &s.revocations
	if now.UnixNano()-rv.loaded.Load() < int64(RevocationRefresh) && rv.set.Load() != nil {
		return nil // another request reloaded it meanwhile
	}
	ids, err := s.store.RevokedTokenIDs(ctx, now)
	if err != nil {
		return err
	}
	set := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		set[id] = struct{}{}
	}
	rv.set.Store(&set)
	rv.loaded.Store(now.UnixNano())
	return nil
}

// addRevoked puts id into the set at once, after its revocation committed.
func (s *Server) addRevoked(id string) {
	rv := &s.revocations
	rv.mu.Lock()
	defer rv.mu.Unlock()
	set := map[string]struct{}{}
	if cur := rv.set.Load(); cur != nil {
		set = maps.Clone(*cur)
	}
	set[id] = struct{}{}
	rv.set.Store(&set)
}

// IssueUserToken mints a user token with the session secret for owner,
// org and login, valid for ttl, and records it in the token registry
// (source says how the user signed in, for example "github"), so its
// owner and admins can list and revoke it. The portal calls it after a
// GitHub sign-in.
func (s *Server) IssueUserToken(ctx context.Context, owner, org, login, source string, ttl time.Duration) (string, error) {
	token, _, err := s.issueUserToken(ctx, owner, org, login, source, ttl, "")
	return token, err
}

// issueUserToken is IssueUserToken that also keeps the user's GitHub
// credential, sealed, when one is given, so that recheckTokens can check
// the user again. It also returns the token's expiry.
func (s *Server) issueUserToken(ctx context.Context, owner, org, login, source string, ttl time.Duration, githubCredential string) (string, time.Time, error) {
	if s.secret == nil {
		return "", time.Time{}, errors.New("coordinator: no session secret configured")
	}
	if ttl <= 0 {
		return "", time.Time{}, errors.New("coordinator: token lifetime must be positive")
	}
	now := s.clock.Now().Truncate(time.Second)
	c := auth.Claims{ID: uuid.NewString(), Owner: owner, Org: org, Login: login, IssuedAt: now, ExpiresAt: now.Add(ttl)}
	token, err := auth.MintUserToken(s.secret, c)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("coordinator: mint token: %w", err)
	}
	if org == "" {
		org = s.defaultOrg
	}
	rec := store.Token{
		ID: c.ID, Owner: owner, Org: org, Login: login, Source: source,
		CreatedAt: c.IssuedAt, ExpiresAt: c.ExpiresAt,
	}
	if githubCredential != "" {
		if rec.GitHub, err = s.sealCredential(c.ID, githubCredential); err != nil {
			return "", time.Time{}, fmt.Errorf("coordinator: seal credential: %w", err)
		}
		rec.CheckedAt = now
	}
	if _, err := s.store.RecordToken(ctx, rec); err != nil {
		return "", time.Time{}, fmt.Errorf("coordinator: record token: %w", err)
	}
	return token, c.ExpiresAt, nil
}

func toAPIToken(t store.Token, current string) api.Token {
	return api.Token{
		ID: t.ID, Owner: t.Owner, Org: t.Org, Login: t.Login, Source: t.Source,
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt,
		Revoked: t.Revoked(), RevokedAt: t.RevokedAt, RevokedBy: t.RevokedBy,
		Current: current != "" && t.ID == current,
	}
}

// listTokens serves GET /v1/tokens: the caller's own tokens.
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	return s.writeTokens(w, r, id, store.TokenFilter{Owner: id.Owner, Org: id.Org})
}

// adminListTokens serves GET /v1/admin/tokens: every token, or those of
// the owner and org the query names.
func (s *Server) adminListTokens(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	q := r.URL.Query()
	return s.writeTokens(w, r, id, store.TokenFilter{Owner: q.Get("owner"), Org: q.Get("org")})
}

func (s *Server) writeTokens(w http.ResponseWriter, r *http.Request, id auth.Identity, f store.TokenFilter) *apiError {
	f.Limit = limitParam(r.URL.Query().Get("limit"), defaultTokenListLimit, maxTokenListLimit)
	ts, err := s.store.ListTokens(r.Context(), f)
	if err != nil {
		return s.fromStore(r, err, "listing tokens", "tokens")
	}
	out := api.TokensResponse{Tokens: make([]api.Token, 0, len(ts))}
	for _, t := range ts {
		out.Tokens = append(out.Tokens, toAPIToken(t, id.TokenID))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// revokeToken serves POST /v1/tokens/{id}/revoke. Owners revoke their own
// tokens (the one they call with included); admins revoke any ID, also
// one the registry never saw (a token minted offline), which leaves a
// tombstone. Repeating a revocation answers the same.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	ref := strings.ToLower(r.PathValue("id"))
	if u, err := uuid.Parse(ref); err != nil || len(ref) != 36 || u.String() != ref {
		return invalid("token ID %s is not a UUID", quote(r.PathValue("id")))
	}
	t, err := s.store.GetToken(r.Context(), ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if !id.Admin && ref != id.TokenID {
			return notFound("token %s not found", quote(ref))
		}
	case err != nil:
		return s.fromStore(r, err, "reading a token", "token")
	case !id.Admin && (t.Owner != id.Owner || t.Org != id.Org):
		return notFound("token %s not found", quote(ref))
	}
	t, err = s.store.RevokeToken(r.Context(), ref, id.Owner, s.clock.Now())
	if err != nil {
		return s.fromStore(r, err, "revoking a token", "token")
	}
	s.addRevoked(ref)
	s.log.Info("token revoked", "token", ref, "by", id.Owner)
	writeJSON(w, http.StatusOK, api.TokenResponse{Token: toAPIToken(t, id.TokenID)})
	return nil
}

// revokeCurrentToken serves POST /v1/tokens/current/revoke: the caller
// revokes the user token the request authenticated with (crabbox logout).
// Static tokens (admin, shared) and proxy identities have no ID to revoke:
// 400 token_not_revocable. Repeating it is not possible: the revoked token
// is refused (401) from then on.
func (s *Server) revokeCurrentToken(w http.ResponseWriter, r *http.Request, id auth.Identity) *apiError {
	if id.TokenID == "" {
		return errorf(http.StatusBadRequest, api.CodeTokenNotRevocable, "this token is not a user token (an admin or shared token configured on the coordinator, or a proxy identity); it cannot be revoked, only changed on the coordinator")
	}
	t, err := s.store.RevokeToken(r.Context(), id.TokenID, id.Owner, s.clock.Now())
	if err != nil {
		return s.fromStore(r, err, "revoking a token", "token")
	}
	s.addRevoked(id.TokenID)
	s.log.Info("token revoked by its holder", "token", id.TokenID, "by", id.Owner)
	writeJSON(w, http.StatusOK, api.TokenResponse{Token: toAPIToken(t, id.TokenID)})
	return nil
}
