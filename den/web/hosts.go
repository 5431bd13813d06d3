package web

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"

	"go.uber.org/zap"
)

// hostNames is the set of Host headers the page answers, against DNS
// rebinding: a page on attacker.example whose name the attacker points at
// this server's address reaches it from a browser on this machine (or
// through an SSH tunnel), but with Host: attacker.example, which is none
// of these. Names are compared in lower case without a trailing dot.
//
// What is allowed (see hostsFor): the listen address's host and its IP;
// localhost, 127.0.0.1 and ::1 always (an SSH tunnel or a port forward
// reaches the page under them, on a local port of its own choosing, so
// their port is not compared); the machine's hostname (and its first
// label) when the page listens beyond loopback; an IP literal equal to the
// address the connection came in on (a scraper or a browser that uses the
// IP; no rebinding goes through an IP literal); and the names configured
// in web.hosts, for a reverse proxy that passes the browser's Host on —
// with a port only on that port, without one on any.
type hostNames struct {
	anyPort  map[string]bool // names allowed on any port
	withPort map[string]bool // "name:port" allowed on that port only
	// refused remembers the names already logged as refused, so that each
	// is logged once (a misconfigured proxy shows in the log; a rebinding
	// page trying every second does not fill it).
	mu      sync.Mutex
	refused map[string]bool
}

// maxRefusedLogged bounds how many refused names are logged (and
// remembered); later ones are refused silently.
const maxRefusedLogged = 32

// hostsFor builds the allowed names from the listen address as configured
// (host:port; empty when not known), the listener's address (may be nil)
// and the configured extra names.
func hostsFor(listen string, addr net.Addr, extra []string) (*hostNames, error) {
	s := &hostNames{anyPort: map[string]bool{}, withPort: map[string]bool{}, refused: map[string]bool{}}
	for _, n := range []string{"localhost", "127.0.0.1", "::1"} {
		s.anyPort[n] = true
	}
	loopbackOnly := true
	add := func(host string) {
		if h, _, ok := splitHost(host); ok {
			s.anyPort[h] = true
			if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
				loopbackOnly = false
			}
		}
	}
	if listen != "" {
		host, _, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("web: listen address %q: %w", listen, err)
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			loopbackOnly = false
		} else {
			add(host)
		}
	}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP != nil {
		if tcp.IP.IsUnspecified() {
			loopbackOnly = false
		} else {
			add(tcp.IP.String())
		}
	}
	if !loopbackOnly {
		if name, err := os.Hostname(); err == nil {
			add(name)
			if short, _, found := strings.Cut(name, "."); found {
				add(short)
			}
		}
	}
	for _, e := range extra {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if strings.ContainsAny(e, "/@?# \t") {
			return nil, fmt.Errorf("web.hosts entry %q: want a host name or host:port as a browser sends it in Host, such as status.example.com", e)
		}
		h, port, ok := splitHost(e)
		if !ok {
			return nil, fmt.Errorf("web.hosts entry %q: want a host name or host:port, such as status.example.com or [2001:db8::1]:8080", e)
		}
		if port == "" {
			s.anyPort[h] = true
		} else {
			s.withPort[net.JoinHostPort(h, port)] = true
		}
	}
	return s, nil
}

// splitHost reads a Host header (or a configured name): lower case, the
// port apart, brackets and a trailing dot removed, an IP in its canonical
// form. ok is false for what is no host at all.
func splitHost(h string) (host, port string, ok bool) {
	h = strings.ToLower(strings.TrimSpace(h))
	switch {
	case h == "":
		return "", "", false
	case strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]"):
		host = h[1 : len(h)-1]
	case strings.Count(h, ":") > 1 && !strings.HasPrefix(h, "["):
		host = h // a bare IPv6 address, as written in a configuration
	default:
		var err error
		if host, port, err = net.SplitHostPort(h); err != nil {
			if strings.Contains(h, ":") {
				return "", "", false
			}
			host, port = h, ""
		}
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || strings.ContainsAny(host, "[]") {
		return "", "", false
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	} else if strings.Contains(host, ":") {
		return "", "", false
	}
	return host, port, true
}

// allows reports whether the request's Host is one of the page's names.
func (s *hostNames) allows(r *http.Request) bool {
	host, port, ok := splitHost(r.Host)
	if !ok {
		return false
	}
	if s.anyPort[host] || (port != "" && s.withPort[net.JoinHostPort(host, port)]) {
		return true
	}
	// An IP literal naming the address the connection came in on.
	if ip := net.ParseIP(host); ip != nil {
		if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if tcp, ok := local.(*net.TCPAddr); ok && tcp.IP.Equal(ip) {
				return true
			}
		}
	}
	return false
}

// misdirected answers a request for a name that is not the page's: 421,
// a short plain body, nothing of the page. The first few such names are
// logged, once each.
func (h *handler) misdirected(w http.ResponseWriter, r *http.Request) {
	name := r.Host
	if len(name) > 100 {
		name = name[:100]
	}
	h.hosts.mu.Lock()
	first := !h.hosts.refused[name] && len(h.hosts.refused) < maxRefusedLogged
	if first {
		h.hosts.refused[name] = true
	}
	h.hosts.mu.Unlock()
	if first {
		h.log.Warn("web: request for a host name this page does not answer to refused with 421 (a proxy's name goes in web.hosts; further requests for it are not logged)",
			zap.String("host", name), zap.String("remote", r.RemoteAddr))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusMisdirectedRequest)
	fmt.Fprintln(w, "421 misdirected request: this server does not answer to that host name")
}
