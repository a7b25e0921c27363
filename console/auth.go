package console

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/webhookd/webhookd"
	"github.com/webhookd/webhookd/configs"
)

const (
	sessionCookie = "webhookd_console"
	sessionLife   = 12 * time.Hour
	csrfField     = "csrf"
)

// auth checks the console's credentials: the admin token, sent as a bearer
// token or typed into the login page, and the session cookie the login page
// sets. The cookie is an expiry and an HMAC over it, keyed by a key derived
// from the token: it never holds the token, every replica with the same
// token accepts it, and changing the token ends every session.
type auth struct {
	token []byte // SHA-256 of the admin token; nil when none is configured
	key   []byte
}

func newAuth(token string) auth {
	if token == "" {
		return auth{}
	}
	sum := sha256.Sum256([]byte(token))
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("webhookd console session key"))
	return auth{token: sum[:], key: mac.Sum(nil)}
}

// tokenOK compares digests, so that neither the time taken nor an early
// return on a length mismatch says anything about the token.
func (a auth) tokenOK(got string) bool {
	sum := sha256.Sum256([]byte(got))
	return a.token != nil && subtle.ConstantTimeCompare(sum[:], a.token) == 1
}

func (a auth) sign(parts ...string) string {
	mac := hmac.New(sha256.New, a.key)
	mac.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// session returns a cookie value that is good until expires.
func (a auth) session(expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + a.sign("session", exp)
}

// sessionOK reports whether v is a session this token signed and that has
// not expired at now.
func (a auth) sessionOK(v string, now time.Time) bool {
	exp, mac, ok := strings.Cut(v, ".")
	if !ok || a.token == nil {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || now.Unix() >= unix {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(a.sign("session", exp)))
}

// csrf returns the CSRF token of a credential: forms carry it, and a POST
// without it is refused. It is bound to the session, so a token read from
// one session's page is worth nothing in another.
func (a auth) csrf(credential string) string { return a.sign("csrf", credential) }

// Locals set by authenticate for the handlers.
const credentialKey = "console.credential"

// bearerCredential stands for the token in the CSRF token of a request
// that sent it as a bearer token.
const bearerCredential = "bearer"

// authenticate lets a request through with the bearer token or a live
// session. Without either, a page sends the browser to the login page, and
// anything else is refused.
func (c *Console) authenticate(fc *fiber.Ctx) error {
	if c.auth.token == nil {
		return errDisabled()
	}
	if h := fc.Get(fiber.HeaderAuthorization); h != "" {
		// The scheme's name is case-insensitive (RFC 9110, 11.1).
		scheme, got, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") || !c.auth.tokenOK(got) {
			return webhookd.Errorf(webhookd.EUNAUTHORIZED, "missing or wrong bearer token")
		}
		fc.Locals(credentialKey, bearerCredential)
		return fc.Next()
	}
	if v := fc.Cookies(sessionCookie); c.auth.sessionOK(v, c.now()) {
		fc.Locals(credentialKey, strings.Clone(v))
		return fc.Next()
	}
	if fc.Method() == fiber.MethodGet && !strings.HasPrefix(fc.Path(), "/ui/tail/events") {
		return fc.Redirect("/ui/login?next="+url.QueryEscape(string(fc.Request().RequestURI())), fiber.StatusSeeOther)
	}
	return webhookd.Errorf(webhookd.EUNAUTHORIZED, "not logged in: log in at /ui/login, or send the admin token as a bearer token")
}

// errDisabled refuses every request of a console without a token, saying
// how to set one.
func errDisabled() error {
	return webhookd.Errorf(webhookd.EUNAUTHORIZED, "console disabled: %s", configs.NoAdminToken)
}

func credential(fc *fiber.Ctx) string {
	s, _ := fc.Locals(credentialKey).(string)
	return s
}

// sameOrigin refuses a cross-site POST, as net/http's CrossOriginProtection
// does: by Sec-Fetch-Site where the browser sends it, else by Origin
// against Host. A request with neither is not from a browser, or from one
// that sends no Origin on a POST, and the CSRF token still guards it.
func sameOrigin(fc *fiber.Ctx) error {
	refused := fiber.NewError(fiber.StatusForbidden, "cross-origin request refused: use the console's own pages")
	switch site := fc.Get("Sec-Fetch-Site"); site {
	case "same-origin", "none":
		return nil
	case "":
	default:
		return refused
	}
	origin := fc.Get(fiber.HeaderOrigin)
	if origin == "" {
		return nil
	}
	if u, err := url.Parse(origin); err != nil || !strings.EqualFold(u.Host, string(fc.Request().Host())) {
		return refused
	}
	return nil
}

// checkPost guards every state-changing request: same origin, and the
// CSRF token of the request's own credential.
func (c *Console) checkPost(fc *fiber.Ctx) error {
	if err := sameOrigin(fc); err != nil {
		return err
	}
	got := fc.FormValue(csrfField)
	if got == "" {
		got = fc.Get("X-CSRF-Token")
	}
	if !hmac.Equal([]byte(got), []byte(c.auth.csrf(credential(fc)))) {
		return fiber.NewError(fiber.StatusForbidden, "the form's CSRF token is missing or wrong: reload the page and try again")
	}
	return fc.Next()
}

// setSession sets or, with an empty value, clears the session cookie.
func (c *Console) setSession(fc *fiber.Ctx, value string, expires time.Time) {
	fc.Cookie(&fiber.Cookie{
		Name:     sessionCookie,
		Value:    value,
		Path:     "/ui/",
		Expires:  expires,
		HTTPOnly: true,
		Secure:   fc.Secure(),
		SameSite: fiber.CookieSameSiteStrictMode,
	})
}

// safeNext returns where a login goes on to: a console path, never another
// site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "/ui//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/"
	}
	return next
}
