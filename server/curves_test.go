package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestTLSCurvePreferences: tlsCurvePreferences (numeric CurveIDs) are parsed as
// upstream, refused by name when invalid, and are the only key exchanges the serving
// port accepts.
func TestTLSCurvePreferences(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ids     []int32
		want    []tls.CurveID
		wantErr string
	}{
		{name: "empty is Go's defaults", ids: nil, want: nil},
		{name: "P-256 and X25519", ids: []int32{23, 29}, want: []tls.CurveID{tls.CurveP256, tls.X25519}},
		{name: "X25519MLKEM768", ids: []int32{4588}, want: []tls.CurveID{tls.X25519MLKEM768}},
		{name: "zero", ids: []int32{0}, wantErr: "out of range"},
		{name: "over uint16", ids: []int32{70000}, wantErr: "out of range"},
		{name: "duplicate", ids: []int32{23, 23}, wantErr: "duplicate curve preference 23"},
		{name: "unknown to Go", ids: []int32{9999}, wantErr: "not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TLSCurvePreferences(tc.ids)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), "tlsCurvePreferences") || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming tlsCurvePreferences and saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}

	crt, key, err := certutil.GenerateSelfSignedCertKey("node-1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := New(Config{NodeName: "node-1", Address: "127.0.0.1", Port: int32(port),
		GetCertificate:   func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil },
		CurvePreferences: []tls.CurveID{tls.CurveP384}},
		Deps{Authenticator: &UnionAuthenticator{}, Authorizer: AlwaysAllow{}, Clock: clocktesting.NewFakeClock(time.Now())})
	ctx, cancel := context.WithCancel(context.Background())
	ports, err := s.Listen(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { ports.Serve(ctx); close(served) }()
	defer func() { cancel(); <-served }()

	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dial := func(curves ...tls.CurveID) (tls.ConnectionState, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, CurvePreferences: curves}) //nolint:gosec // a self-signed test server
		if err != nil {
			return tls.ConnectionState{}, err
		}
		defer conn.Close()
		return conn.ConnectionState(), nil
	}
	// A client offering Go's defaults (X25519 first) ends up on the configured P-384.
	st, err := dial()
	if err != nil {
		t.Fatalf("handshake with Go's default curves: %v", err)
	}
	if st.CurveID != tls.CurveP384 {
		t.Errorf("negotiated %v, want %v (the only configured curve)", st.CurveID, tls.CurveP384)
	}
	// A client offering only curves the server does not accept fails the handshake.
	if _, err := dial(tls.X25519, tls.CurveP256); err == nil {
		t.Error("a client offering only X25519 and P-256 completed the handshake; the server accepts only P-384")
	}
}
