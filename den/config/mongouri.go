package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/den-project/den/den/internal/mongoclient"
)

// checkMongoURI parses uri as den's client will (mongoclient.Options and
// the driver's own parser), so that a URI the driver cannot use stops den
// at start with the driver's reason, instead of making a node retry for
// ever. A bare word is no URI: "junk" is refused, not taken for the host
// junk. A mongodb+srv:// URI is parsed as mongodb:// (its DNS records are
// looked up when den connects, not here): it must name one host, without
// a port. Files the URI names are not read here. The error names where
// the URI came from and never shows a password (redact, scrub).
func checkMongoURI(uri, from string) error {
	check := uri
	if rest, ok := strings.CutPrefix(uri, "mongodb+srv://"); ok {
		hosts := rest
		if at := strings.Index(hosts, "@"); at >= 0 {
			hosts = hosts[at+1:]
		}
		if end := strings.IndexAny(hosts, "/?"); end >= 0 {
			hosts = hosts[:end]
		}
		if _, _, err := net.SplitHostPort(hosts); err == nil || strings.Contains(hosts, ",") {
			return fmt.Errorf("%s %q: a mongodb+srv URI names one host, without a port (%s)", from, redact(uri), hosts)
		}
		check = "mongodb://" + dropOptions(rest, "srvservicename", "srvmaxhosts")
	}
	err := mongoclient.Options(check, "den").Validate()
	var file *fs.PathError
	if err == nil || errors.As(err, &file) {
		// Parsed; a file it names (tlsCAFile, tlsCertificateKeyFile) is
		// read when den connects, on the machine that does.
		return nil
	}
	msg := scrub(err.Error(), uri)
	if !strings.Contains(uri, "://") {
		msg += fmt.Sprintf(" (a URI such as mongodb://%s/; den no longer takes a bare host name)", redact(uri))
	}
	return fmt.Errorf("%s %q: %w", from, redact(uri), errors.New(msg))
}

// dropOptions removes the query options named (lower case) from a URI
// without its scheme.
func dropOptions(rest string, names ...string) string {
	base, query, ok := strings.Cut(rest, "?")
	if !ok {
		return rest
	}
	var kept []string
	for _, pair := range strings.FieldsFunc(query, func(r rune) bool { return r == ';' || r == '&' }) {
		k, _, _ := strings.Cut(pair, "=")
		drop := false
		for _, n := range names {
			drop = drop || strings.EqualFold(k, n)
		}
		if !drop {
			kept = append(kept, pair)
		}
	}
	if len(kept) == 0 {
		return base
	}
	return base + "?" + strings.Join(kept, "&")
}

// secretOptions are the URI options whose values are secrets.
var secretOptions = regexp.MustCompile(`(?i)((?:^|[?&;])(?:tlsCertificateKeyFilePassword|sslClientCertificateKeyPassword|authMechanismProperties)=)([^&;]*)`)

// redact returns uri with its password and secret options replaced by
// xxxxx, whether or not it parses: the user information ends at the last
// @ (a password with an @ the URI forgot to escape is hidden too, and an
// @ in an option hides a little more than needed).
func redact(uri string) string {
	scheme, rest, ok := strings.Cut(uri, "://")
	if !ok {
		scheme, rest = "", uri
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	rest = secretOptions.ReplaceAllString(rest, "${1}xxxxx")
	if ok {
		return scheme + "://" + rest
	}
	return rest
}

// urlEscapeError is how url.PathUnescape quotes the bad part of a value:
// a piece of a password, perhaps.
var urlEscapeError = regexp.MustCompile(`invalid URL escape "[^"]*"`)

// scrub removes from a driver's error about uri every secret of uri: the
// password (as the driver splits the user information, at the first @,
// and as redact does, at the last), the secret options' values, each as
// written and decoded, and the piece of a value an escape error quotes.
func scrub(msg, uri string) string {
	var secrets []string
	add := func(s string) {
		if s == "" {
			return
		}
		secrets = append(secrets, s)
		if d, err := url.PathUnescape(s); err == nil && d != s && d != "" {
			secrets = append(secrets, d)
		}
	}
	_, rest, ok := strings.Cut(uri, "://")
	if !ok {
		rest = uri
	}
	for _, at := range []int{strings.Index(rest, "@"), strings.LastIndex(rest, "@")} {
		if at >= 0 {
			if _, pw, has := strings.Cut(rest[:at], ":"); has {
				add(pw)
			}
		}
	}
	for _, m := range secretOptions.FindAllStringSubmatch(rest, -1) {
		add(m[2])
	}
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return urlEscapeError.ReplaceAllString(msg, "invalid URL escape (a % not followed by two hex digits; write % itself as %25)")
}
