package credentialprovider

import (
	"net"
	"net/url"
	"path/filepath"
	"strings"
)

// URLMatches says whether pattern (a matchImages entry, a provider's auth key
// or a pull secret's registry location) covers image (a schemeless
// "host[:port]/path", tag and digest removed), as upstream matches them: the
// same number of host labels, each matched as a glob ("*.example.com",
// "k8s.*", "app*.k8s.io"; one glob never spans a dot), the same port, and the
// pattern's path a prefix of the image's path.
func URLMatches(pattern, image string) bool {
	gh, gp := splitLocation(pattern)
	th, tp := splitLocation(image)
	gHost, gPort := splitHostPort(gh)
	tHost, tPort := splitHostPort(th)
	if gPort != tPort {
		return false
	}
	gl, tl := strings.Split(gHost, "."), strings.Split(tHost, ".")
	if len(gl) != len(tl) {
		return false
	}
	for i := range gl {
		if ok, _ := filepath.Match(gl[i], tl[i]); !ok {
			return false
		}
	}
	return strings.HasPrefix(tp, gp)
}

func splitLocation(s string) (host, path string) {
	if i := strings.Index(s, "/"); i >= 0 {
		return s[:i], s[i:]
	}
	return s, ""
}

func splitHostPort(hp string) (string, string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		return h, p
	}
	return hp, ""
}

// registryOf is the image's registry: its host and port.
func registryOf(image string) string {
	host, _ := splitLocation(image)
	return host
}

// validPattern reports whether a matchImages entry parses as a schemeless
// URL with a host, globs allowed only in the host, as upstream validates it.
func validPattern(p string) bool {
	if p == "" || strings.Contains(p, "://") {
		return false
	}
	u, err := url.Parse("https://" + p)
	if err != nil || u.Host == "" {
		return false
	}
	_, port := splitHostPort(u.Host)
	return !strings.ContainsAny(port, "*?[") && !strings.ContainsAny(u.Path, "*?[")
}
