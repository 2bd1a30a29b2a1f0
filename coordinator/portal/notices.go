package portal

import (
	"errors"

	"github.com/crabbox-dev/crabbox/coordinator/github"
)

// notice is a message for the sign-in page, carried in its address by
// the portal's own redirects as a code (?msg=) and, for a GitHub refusal,
// the allowed org it concerns (?org=). The page shows only texts the
// server holds for known codes, naming only orgs and teams of its own
// configuration: a link cannot put its own words in the banner.
type notice struct {
	Code, Org string
}

// Codes of the notices that are not GitHub refusals (those use the
// github.Refused codes).
const (
	noticeSignedOut           = "signed_out"
	noticeSignedOutRevoked    = "signed_out_revoked"
	noticeSignedOutNotRevoked = "signed_out_not_revoked"
	noticeSessionEnded        = "session_ended"
	noticeGitHubTokenRefused  = "github_token_refused"
	noticeGitHubEnded         = "github_ended"
)

// gitHubEnded begins the notice of a GitHub session whose user lost
// access.
const gitHubEnded = "Your GitHub access to this coordinator ended: "

var notices = map[string]string{
	noticeSignedOut:           "Signed out. The token you signed in with stays valid.",
	noticeSignedOutRevoked:    "Signed out. The crabbox token this GitHub sign-in issued is revoked.",
	noticeSignedOutNotRevoked: "Signed out. The crabbox token this GitHub sign-in issued could not be revoked just now; it stays valid until it expires or you revoke it on the Tokens page.",
	noticeSessionEnded:        "Your session ended: sign in again.",
	noticeGitHubTokenRefused:  gitHubEnded + "GitHub no longer accepts the token of your sign-in (revoked or expired). Sign in again.",
	noticeGitHubEnded:         gitHubEnded + "GitHub no longer lets this account in. Sign in again to see why.",
}

// noticeText is the text of notice n; empty for an unknown code, or a
// refusal about an org this coordinator does not allow.
func (p *Portal) noticeText(n notice) string {
	if text, ok := notices[n.Code]; ok {
		return text
	}
	if p.cfg.GitHub == nil {
		return ""
	}
	if r, ok := p.cfg.GitHub.Refusal(n.Org, github.Refused(n.Code)); ok {
		return gitHubEnded + r.String() + "."
	}
	return ""
}

// deniedNotice is the notice for a GitHub check that denied the user.
func deniedNotice(err error) notice {
	if de, ok := errors.AsType[*github.DeniedError](err); ok && len(de.Refusals) == 1 {
		return notice{Code: string(de.Refusals[0].Why), Org: de.Refusals[0].Org}
	}
	if errors.Is(err, github.ErrTokenRefused) {
		return notice{Code: noticeGitHubTokenRefused}
	}
	return notice{Code: noticeGitHubEnded}
}
