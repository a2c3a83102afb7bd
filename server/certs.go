package server

import (
	"crypto/tls"
	"fmt"

	cliflag "k8s.io/component-base/cli/flag"
)

// CipherSuites maps tlsCipherSuites names (Go's IANA names) to IDs.
func CipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	known := map[string]uint16{}
	for _, c := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		known[c.Name] = c.ID
	}
	out := make([]uint16, 0, len(names))
	for _, n := range names {
		id, ok := known[n]
		if !ok {
			return nil, fmt.Errorf("unknown TLS cipher suite %q in tlsCipherSuites", n)
		}
		out = append(out, id)
	}
	return out, nil
}

// TLSVersion maps tlsMinVersion ("VersionTLS12", ...) to its ID; "" is 0 (the default).
func TLSVersion(name string) (uint16, error) {
	switch name {
	case "":
		return 0, nil
	case "VersionTLS10":
		return tls.VersionTLS10, nil
	case "VersionTLS11":
		return tls.VersionTLS11, nil
	case "VersionTLS12":
		return tls.VersionTLS12, nil
	case "VersionTLS13":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("unknown tlsMinVersion %q (VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13)", name)
}

// TLSCurvePreferences maps tlsCurvePreferences (numeric crypto/tls CurveIDs, as
// upstream) to the serving TLS config's curve preferences; nil (Go's defaults) when
// empty. An ID out of range, repeated or unknown to this Go version is refused, naming
// the field.
func TLSCurvePreferences(ids []int32) ([]tls.CurveID, error) {
	curves, err := cliflag.TLSCurvePreferences(ids)
	if err != nil {
		return nil, fmt.Errorf("invalid configuration: tlsCurvePreferences %v: %w", ids, err)
	}
	return curves, nil
}
