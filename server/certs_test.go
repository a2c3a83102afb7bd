package server

import (
	"crypto/tls"
	"testing"
)

func TestCipherSuitesAndTLSVersion(t *testing.T) {
	ids, err := CipherSuites([]string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_RSA_WITH_AES_128_CBC_SHA"})
	if err != nil || len(ids) != 2 || ids[0] != tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 || ids[1] != tls.TLS_RSA_WITH_AES_128_CBC_SHA {
		t.Errorf("CipherSuites = %v, %v", ids, err)
	}
	if _, err := CipherSuites([]string{"TLS_NOPE"}); err == nil {
		t.Error("an unknown suite was accepted")
	}
	if ids, err := CipherSuites(nil); ids != nil || err != nil {
		t.Errorf("no suites = %v, %v; want Go's defaults (nil)", ids, err)
	}
	for name, want := range map[string]uint16{"": 0, "VersionTLS12": tls.VersionTLS12, "VersionTLS13": tls.VersionTLS13} {
		if got, err := TLSVersion(name); got != want || err != nil {
			t.Errorf("TLSVersion(%q) = %v, %v", name, got, err)
		}
	}
	if _, err := TLSVersion("TLS1.2"); err == nil {
		t.Error("an unknown version was accepted")
	}
}
