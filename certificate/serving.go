package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
	"github.com/nodelet/nodelet/internal/periodic"
)

// ServingOptions say where the certificate for nodelet's HTTPS port comes from.
type ServingOptions struct {
	NodeName string
	// Hostname names the self-signed certificate (upstream: the host name,
	// or --hostname-override).
	Hostname string
	CertDir  string // --cert-dir
	// TLSCertFile and TLSPrivateKeyFile are tlsCertFile/tlsPrivateKeyFile.
	TLSCertFile, TLSPrivateKeyFile string
	// ServerTLSBootstrap is serverTLSBootstrap: request the certificate with
	// a CSR (signer kubernetes.io/kubelet-serving) and rotate it.
	ServerTLSBootstrap bool
	// Client files the serving CSRs (the node's own credential). Nil
	// (standalone): no CSR is ever filed.
	Client kubernetes.Interface
	// NodeAddresses are the SANs of the serving CSR (the Node's
	// status.addresses); until one of them is an IP, no CSR is filed, as
	// upstream.
	NodeAddresses func() []v1.NodeAddress
	// Registerer receives kubelet_certificate_manager_server_ttl_seconds,
	// kubelet_certificate_manager_server_rotation_seconds and
	// kubelet_server_expiration_renew_errors with serverTLSBootstrap.
	Registerer prometheus.Registerer
	Clock      clock.WithTicker
	// ReloadEvery is how often a file-based pair is checked for changes
	// (default 10s).
	ReloadEvery time.Duration
}

// Serving is the serving certificate of the kubelet API. Hand GetCertificate
// to tls.Config.GetCertificate; Run keeps it current.
type Serving struct {
	opts    ServingOptions
	clk     clock.WithTicker
	manager certificate.Manager // serverTLSBootstrap
	file    *filePair           // tlsCertFile or self-signed
	warn    *warner
}

// NewServing picks the serving certificate as upstream does: a CSR-issued,
// rotated certificate with serverTLSBootstrap; otherwise tlsCertFile and
// tlsPrivateKeyFile (reloaded when they change); otherwise a self-signed
// pair <cert-dir>/kubelet.crt and kubelet.key, generated once and kept.
func NewServing(ctx context.Context, opts ServingOptions) (*Serving, error) {
	logger := klog.FromContext(ctx)
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	s := &Serving{opts: opts, clk: clk, warn: newWarner(logger, clk, opts.NodeName)}
	if opts.ServerTLSBootstrap {
		return s, s.setUpBootstrap(ctx)
	}
	certFile, keyFile := opts.TLSCertFile, opts.TLSPrivateKeyFile
	if certFile == "" && keyFile == "" {
		certFile, keyFile = filepath.Join(opts.CertDir, selfSignedCertFile), filepath.Join(opts.CertDir, selfSignedKeyFile)
		if err := ensureSelfSigned(logger, certFile, keyFile, opts.Hostname); err != nil {
			return nil, err
		}
		logger.V(2).Info("Serving with a self-signed certificate", "certFile", certFile, "keyFile", keyFile)
	}
	s.file = &filePair{certFile: certFile, keyFile: keyFile}
	if err := s.file.load(); err != nil {
		if opts.TLSCertFile != "" {
			// The operator's files are never rewritten: a bad one stops the start-up.
			return nil, fmt.Errorf("tlsCertFile/tlsPrivateKeyFile (nodelet never replaces them; fix or replace the file): %w", err)
		}
		return nil, err
	}
	return s, nil
}

func (s *Serving) setUpBootstrap(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	store, err := certificate.NewFileStoreWithLogger(logger.V(2), serverPairPrefix, s.opts.CertDir, s.opts.CertDir, s.opts.TLSCertFile, s.opts.TLSPrivateKeyFile)
	if err != nil {
		return fmt.Errorf("opening the serving certificate store in %s: %w", s.opts.CertDir, err)
	}
	renewErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "kubelet", Name: "server_expiration_renew_errors",
		Help: "Counter of certificate renewal errors.",
	})
	rotation := prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "kubelet", Subsystem: "certificate_manager", Name: "server_rotation_seconds",
		Help: "Histogram of the number of seconds the previous certificate lived before being rotated.",
		// 1 minute, 1 hour, 4 hours, 1 day, 1 week, 1, 3 and 6 months, 1 and 4 years, as upstream.
		Buckets: []float64{60, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000},
	})
	var clientsetFn certificate.ClientsetFunc
	if s.opts.Client != nil {
		clientsetFn = func(*tls.Certificate) (kubernetes.Interface, error) { return s.opts.Client, nil }
	} else {
		logger.Info("serverTLSBootstrap is set but there is no API server (standalone): no serving certificate can be requested")
	}
	mgrCtx := klog.NewContext(ctx, logger.WithName("serving-certificate"))
	s.manager, err = certificate.NewManager(&certificate.Config{
		ClientsetFn:             clientsetFn,
		GetTemplate:             func() *x509.CertificateRequest { return servingTemplate(s.opts.NodeName, s.addresses()) },
		SignerName:              certificatesv1.KubeletServingSignerName,
		GetUsages:               certificate.DefaultKubeletServingGetUsages,
		CertificateStore:        store,
		CertificateRotation:     rotation,
		CertificateRenewFailure: failureHook{counter: renewErrors, onFailure: func() { s.warn.renewalFailed("serving", s.manager.Current()) }},
		Name:                    "serving",
		Ctx:                     &mgrCtx,
	})
	if err != nil {
		return fmt.Errorf("setting up serving certificate rotation: %w", err)
	}
	if s.opts.Registerer != nil {
		ttl := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "kubelet", Subsystem: "certificate_manager", Name: "server_ttl_seconds",
			Help: "Gauge of the shortest TTL (time-to-live) of the Kubelet's serving certificate. The value is in seconds until certificate expiry (negative if already expired). If serving certificate is invalid or unused, the value will be +INF.",
		}, func() float64 { return ttlSeconds(s.manager.Current(), s.clk.Now()) })
		for _, m := range []prometheus.Collector{ttl, rotation, renewErrors} {
			if err := s.opts.Registerer.Register(m); err != nil {
				return fmt.Errorf("registering serving certificate metrics: %w", err)
			}
		}
	}
	return nil
}

func (s *Serving) addresses() []v1.NodeAddress {
	if s.opts.NodeAddresses == nil {
		return nil
	}
	return s.opts.NodeAddresses()
}

// GetCertificate is for tls.Config.GetCertificate: the current serving
// certificate, or an error while there is none (a serving CSR not yet
// approved).
func (s *Serving) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.Current(); c != nil {
		return c, nil
	}
	return nil, errors.New("no serving certificate available for the kubelet")
}

// Current is the serving certificate now, or nil.
func (s *Serving) Current() *tls.Certificate {
	if s.manager != nil {
		return s.manager.Current()
	}
	return s.file.current()
}

// Run keeps the certificate current until ctx ends: with serverTLSBootstrap
// it files and rotates CSRs (renewal failures are logged and reported as
// events on the Node through rec); otherwise it reloads the files when they
// change.
func (s *Serving) Run(ctx context.Context, rec record.EventRecorder) {
	logger := klog.FromContext(ctx)
	if s.manager != nil {
		s.warn.setRecorder(rec)
		s.manager.Start()
		defer s.manager.Stop()
		<-ctx.Done()
		return
	}
	periodic.Every(ctx, s.clk, durationOr(s.opts.ReloadEvery, 10*time.Second), func(context.Context) {
		changed, err := s.file.reloadIfChanged()
		if err != nil {
			logger.Error(err, "Reloading the serving certificate; keeping the one in use", "certFile", s.file.certFile, "keyFile", s.file.keyFile)
		} else if changed {
			c := s.file.current()
			logger.Info("Serving certificate reloaded from its files", "certFile", s.file.certFile, "notAfter", c.Leaf.NotAfter)
		}
	})
}

// servingTemplate is the serving CSR for the node: CN system:node:<name>,
// O system:nodes, SANs from the node name and the Node's addresses. Nil (no
// request yet) while there is no IP address, as upstream.
func servingTemplate(nodeName string, addrs []v1.NodeAddress) *x509.CertificateRequest {
	dns := map[string]bool{}
	ips := map[string]net.IP{}
	add := func(a string, ipOnly bool) {
		if a == "" {
			return
		}
		if ip := net.ParseIP(a); ip != nil {
			ips[ip.String()] = ip
		} else if !ipOnly {
			dns[a] = true
		}
	}
	for _, a := range addrs {
		switch a.Type {
		case v1.NodeHostName, v1.NodeInternalDNS, v1.NodeExternalDNS:
			add(a.Address, false)
		case v1.NodeInternalIP, v1.NodeExternalIP:
			add(a.Address, true)
		}
	}
	if len(ips) == 0 {
		return nil
	}
	// The node name is what the API server dials when it prefers Hostname.
	add(nodeName, false)
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{
		CommonName:   "system:node:" + nodeName,
		Organization: []string{"system:nodes"},
	}}
	for d := range dns {
		tmpl.DNSNames = append(tmpl.DNSNames, d)
	}
	sort.Strings(tmpl.DNSNames)
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	}
	sort.Slice(tmpl.IPAddresses, func(i, j int) bool { return tmpl.IPAddresses[i].String() < tmpl.IPAddresses[j].String() })
	return tmpl
}

// ensureSelfSigned makes sure certFile and keyFile hold a self-signed pair
// that parses and belongs together. nodelet alone writes them, so a pair it
// cannot use (empty or cut short by a crash while an older version wrote it,
// or a key and certificate from different runs) is generated again rather
// than stopping the start-up.
func ensureSelfSigned(logger klog.Logger, certFile, keyFile, host string) error {
	_, certErr := os.Stat(certFile)
	_, keyErr := os.Stat(keyFile)
	if !errors.Is(certErr, fs.ErrNotExist) || !errors.Is(keyErr, fs.ErrNotExist) {
		_, err := loadPair(certFile, keyFile)
		if err == nil {
			return nil
		}
		logger.Info("The self-signed serving certificate is unusable (a write was interrupted); generating a new pair",
			"certFile", certFile, "keyFile", keyFile, "err", err)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
	if err != nil {
		return fmt.Errorf("generating a self-signed serving certificate for %s: %w", host, err)
	}
	// Key first: a crash before the certificate is written leaves a pair that
	// does not match, which the next start generates again.
	if err := atomicfile.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return fmt.Errorf("storing the self-signed serving key: %w", err)
	}
	if err := atomicfile.WriteFile(certFile, certPEM, 0o644); err != nil {
		return fmt.Errorf("storing the self-signed serving certificate: %w", err)
	}
	return nil
}

// loadPair reads a certificate and its key, saying which file is at fault:
// the error names the file that does not parse, or both when they do not
// belong together.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("reading the certificate: %w", err)
	}
	if _, err := certutil.ParseCertsPEM(certPEM); err != nil {
		return nil, fmt.Errorf("the certificate %s cannot be parsed: %w", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("reading the key: %w", err)
	}
	if _, err := keyutil.ParsePrivateKeyPEM(keyPEM); err != nil {
		return nil, fmt.Errorf("the key %s cannot be parsed: %w", keyFile, err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the certificate %s and the key %s do not belong together: %w", certFile, keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, fmt.Errorf("the certificate %s cannot be parsed: %w", certFile, err)
		}
	}
	return &pair, nil
}

// filePair is a certificate and key read from files, reloaded when either
// file's size or modification time changes.
type filePair struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	stamp             string
}

func fileStamp(paths ...string) (string, error) {
	out := ""
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		out += fmt.Sprintf("%s:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano())
	}
	return out, nil
}

func (f *filePair) load() error {
	stamp, err := fileStamp(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("reading the serving certificate: %w", err)
	}
	pair, err := loadPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("loading the serving certificate: %w", err)
	}
	f.mu.Lock()
	f.cert, f.stamp = pair, stamp
	f.mu.Unlock()
	return nil
}

func (f *filePair) reloadIfChanged() (bool, error) {
	stamp, err := fileStamp(f.certFile, f.keyFile)
	if err != nil {
		return false, fmt.Errorf("reading the serving certificate: %w", err)
	}
	f.mu.Lock()
	same := stamp == f.stamp
	f.mu.Unlock()
	if same {
		return false, nil
	}
	return true, f.load()
}

func (f *filePair) current() *tls.Certificate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cert
}
