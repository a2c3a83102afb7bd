package certificate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/connrotation"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/periodic"
)

// ClientOptions say where the node's API credential comes from.
type ClientOptions struct {
	Kubeconfig          string // --kubeconfig
	BootstrapKubeconfig string // --bootstrap-kubeconfig ("" = no TLS bootstrap)
	CertDir             string // --cert-dir
	NodeName            string
	RotateCertificates  bool // rotateCertificates
	// Registerer receives kubelet_certificate_manager_client_ttl_seconds and
	// kubelet_certificate_manager_client_expiration_renew_errors when
	// rotation is on (as upstream). Nil: no metrics.
	Registerer prometheus.Registerer
	Clock      clock.WithTicker
	// NewClient builds clientsets for CSRs (bootstrap and rotation); nil
	// means kubernetes.NewForConfig. Tests inject fake clientsets.
	NewClient func(*rest.Config) (kubernetes.Interface, error)
	// Bootstrap tunes the TLS bootstrap's retries (zero values: defaults).
	Bootstrap Bootstrapper
}

// Client is the node's API credential: the rest.Config every API client is
// built from and, with rotateCertificates, the manager that renews its
// certificate before it expires.
type Client struct {
	opts    ClientOptions
	clk     clock.WithTicker
	static  *rest.Config // the kubeconfig as loaded
	config  *rest.Config // what API clients use (rotating transport when rotation is on)
	manager certificate.Manager
	dialer  *connrotation.Dialer
	warn    *warner
}

// NewClient applies the upstream rules for choosing the credential:
//
//  1. Without a bootstrap kubeconfig, the kubeconfig is used as it is.
//  2. With one, a kubeconfig that exists and holds a client certificate that
//     has not expired is used, and the bootstrap kubeconfig is ignored.
//  3. Otherwise nodelet bootstraps: with rotation on, a still valid
//     kubelet-client-current.pem in the cert dir is reused; if there is none,
//     the bootstrap credential files a CSR (blocking, retried with back-off
//     until it is issued or ctx ends). Then the kubeconfig is (re)written to
//     point at <cert-dir>/kubelet-client-current.pem, with the bootstrap
//     kubeconfig's server and CA.
//
// With rotateCertificates the returned Client's RESTConfig presents the
// certificate manager's current certificate on every new connection; Run
// starts the rotation.
func NewClient(ctx context.Context, opts ClientOptions) (*Client, error) {
	logger := klog.FromContext(ctx)
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	c := &Client{opts: opts, clk: clk}
	if opts.BootstrapKubeconfig != "" {
		valid, reason, err := KubeconfigStillValid(opts.Kubeconfig, clk.Now())
		if err != nil {
			return nil, err
		}
		if valid {
			logger.V(2).Info("Kubeconfig exists and is valid; the bootstrap kubeconfig is not needed", "kubeconfig", opts.Kubeconfig)
		} else {
			logger.Info("Using the bootstrap kubeconfig to get a client certificate", "reason", reason,
				"kubeconfig", opts.Kubeconfig, "bootstrapKubeconfig", opts.BootstrapKubeconfig, "certDir", opts.CertDir)
			// A bootstrap kubeconfig that cannot be loaded now stops the start,
			// as upstream; one that breaks between attempts is retried.
			if err := CheckBootstrapKubeconfig(opts.Kubeconfig, opts.BootstrapKubeconfig, clk.Now()); err != nil {
				return nil, err
			}
			if err := c.bootstrap(ctx); err != nil {
				return nil, err
			}
		}
	}
	static, err := LoadRESTConfig(opts.Kubeconfig)
	if err != nil {
		return nil, err
	}
	c.static = static
	if !opts.RotateCertificates {
		c.config = rest.CopyConfig(static)
		if c.config.Transport == nil && c.config.Dial == nil {
			c.dialer = newConnDialer(nil)
			c.config.Dial = c.dialer.DialContext
		}
		return c, nil
	}

	store, err := certificate.NewFileStoreWithLogger(logger.V(2), clientPairPrefix, opts.CertDir, opts.CertDir, static.CertFile, static.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("opening the client certificate store in %s: %w", opts.CertDir, err)
	}
	renewErrors := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "kubelet", Subsystem: "certificate_manager", Name: "client_expiration_renew_errors",
		Help: "Counter of certificate renewal errors.",
	})
	c.warn = newWarner(logger, clk, opts.NodeName)
	mgrCtx := klog.NewContext(ctx, logger.WithName("client-certificate"))
	c.manager, err = certificate.NewManager(&certificate.Config{
		ClientsetFn: c.clientsetFor,
		Template: &x509.CertificateRequest{Subject: pkix.Name{
			CommonName:   "system:node:" + opts.NodeName,
			Organization: []string{"system:nodes"},
		}},
		SignerName: certificatesv1.KubeAPIServerClientKubeletSignerName,
		GetUsages:  certificate.DefaultKubeletClientGetUsages,
		// A kubeconfig with inline certificate data (kubeadm's kubelet.conf on
		// a control-plane node) seeds the store and is rotated out at once.
		BootstrapCertificatePEM: static.CertData,
		BootstrapKeyPEM:         static.KeyData,
		CertificateStore:        store,
		CertificateRenewFailure: failureHook{counter: renewErrors, onFailure: func() {
			c.warn.renewalFailed("client", c.manager.Current())
		}},
		Name: "client",
		Ctx:  &mgrCtx,
	})
	if err != nil {
		return nil, fmt.Errorf("setting up client certificate rotation: %w", err)
	}
	if opts.Registerer != nil {
		ttl := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "kubelet", Subsystem: "certificate_manager", Name: "client_ttl_seconds",
			Help: "Gauge of the TTL (time-to-live) of the Kubelet's client certificate. The value is in seconds until certificate expiry (negative if already expired). If client certificate is invalid or unused, the value will be +INF.",
		}, func() float64 { return ttlSeconds(c.manager.Current(), clk.Now()) })
		for _, m := range []prometheus.Collector{ttl, renewErrors} {
			if err := opts.Registerer.Register(m); err != nil {
				return nil, fmt.Errorf("registering client certificate metrics: %w", err)
			}
		}
	}
	c.config, c.dialer, err = rotatingConfig(static, c.manager.Current)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// bootstrap gets a client certificate into the store and writes the
// kubeconfig that points at it.
func (c *Client) bootstrap(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	store, err := certificate.NewFileStoreWithLogger(logger.V(2), clientPairPrefix, c.opts.CertDir, c.opts.CertDir, "", "")
	if err != nil {
		return fmt.Errorf("opening the client certificate store in %s: %w", c.opts.CertDir, err)
	}
	reuse := false
	if c.opts.RotateCertificates {
		// With rotation on, upstream hands the cert dir to the certificate
		// manager, which keeps using a current pair that has not expired.
		if cur, err := store.Current(); err == nil && cur.Leaf != nil && c.clk.Now().Before(cur.Leaf.NotAfter) {
			reuse = true
			logger.Info("Reusing the client certificate in the cert dir", "path", store.CurrentPath(), "notAfter", cur.Leaf.NotAfter)
		}
	}
	if !reuse {
		b := c.opts.Bootstrap
		b.NodeName, b.CertDir, b.BootstrapKubeconfig = c.opts.NodeName, c.opts.CertDir, c.opts.BootstrapKubeconfig
		if b.Clock == nil {
			b.Clock = c.clk
		}
		if b.NewClient == nil {
			b.NewClient = c.opts.NewClient
		}
		issued, err := b.Run(ctx)
		if err != nil {
			return err
		}
		if _, err := store.Update(issued.CertPEM, issued.KeyPEM); err != nil {
			return fmt.Errorf("storing the client certificate in %s: %w", c.opts.CertDir, err)
		}
		if err := os.Remove(b.pendingKeyPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
			logger.Error(err, "Removing the bootstrap key after it was stored with its certificate", "path", b.pendingKeyPath())
		}
	}
	bootCfg, err := LoadRESTConfig(c.opts.BootstrapKubeconfig)
	if err != nil {
		return err
	}
	if err := writeKubeconfig(bootCfg, c.opts.Kubeconfig, store.CurrentPath()); err != nil {
		return err
	}
	logger.Info("Wrote the kubeconfig for the node's client certificate", "kubeconfig", c.opts.Kubeconfig, "certificate", store.CurrentPath())
	return nil
}

// clientsetFor is the certificate manager's CSR client: the node's own
// credential while it is valid. Without one (never issued, or expired) it
// falls back to the bootstrap kubeconfig, read afresh, so an expired node
// recovers without a restart; without a bootstrap kubeconfig it can only try
// the kubeconfig's own credential.
func (c *Client) clientsetFor(current *tls.Certificate) (kubernetes.Interface, error) {
	newClient := c.opts.NewClient
	if newClient == nil {
		newClient = func(cfg *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(cfg) }
	}
	if current != nil {
		return newClient(c.config)
	}
	if c.opts.BootstrapKubeconfig != "" {
		cfg, err := LoadRESTConfig(c.opts.BootstrapKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("no valid client certificate, and the bootstrap kubeconfig cannot be read: %w", err)
		}
		return newClient(cfg)
	}
	return newClient(c.static)
}

// RESTConfig is a copy of the configuration API clients are built from.
func (c *Client) RESTConfig() *rest.Config { return rest.CopyConfig(c.config) }

// Current is the client certificate in use (nil without rotation, before the
// first one, or once it expired).
func (c *Client) Current() *tls.Certificate {
	if c.manager == nil {
		return nil
	}
	return c.manager.Current()
}

// Run rotates the client certificate until ctx ends (nothing to do without
// rotateCertificates). When the certificate changes, every client connection
// is closed so that the next ones present the new certificate: HTTP/2 keeps
// one connection open for all requests, and the old certificate would be
// used on it until it expired. Renewal failures are logged and reported as
// events on the Node through rec.
func (c *Client) Run(ctx context.Context, rec record.EventRecorder) {
	if c.manager == nil {
		return
	}
	logger := klog.FromContext(ctx)
	c.warn.setRecorder(rec)
	c.manager.Start()
	defer c.manager.Stop()
	last := c.manager.Current()
	expiredReported := false
	periodic.Every(ctx, c.clk, time.Second, func(context.Context) {
		cur := c.manager.Current()
		switch {
		case cur == nil && last != nil && !expiredReported:
			expiredReported = true
			logger.Error(nil, "The client certificate expired before it could be renewed; requests to the API server fail until a new one is issued",
				"notAfter", last.Leaf.NotAfter, "bootstrapKubeconfig", c.opts.BootstrapKubeconfig,
				"whatToDo", "check the csrsigning/csrapproving controllers and the API server; with a bootstrap kubeconfig nodelet asks with it, otherwise give it a new kubeconfig")
		case cur != nil && cur != last:
			expiredReported = false
			if last != nil {
				logger.Info("Client certificate rotated; closing client connections so that new ones use it",
					"serial", cur.Leaf.SerialNumber.String(), "notBefore", cur.Leaf.NotBefore, "notAfter", cur.Leaf.NotAfter)
			}
			last = cur
			c.dialer.CloseAll()
		}
	})
}

// CloseAllConns closes every connection of the API clients built from
// RESTConfig, so that their next requests dial anew. The node controller calls it
// after repeated heartbeat failures, as upstream does: HTTP/2 carries every
// request on one connection, and a half-dead one would hold them all.
func (c *Client) CloseAllConns() {
	if c.dialer != nil {
		c.dialer.CloseAll()
	}
}

// newConnDialer wraps dial (nil: upstream's 30s dial timeout and keep-alive) so
// that its connections can all be closed at once.
func newConnDialer(dial connrotation.DialFunc) *connrotation.Dialer {
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return connrotation.NewDialer(dial)
}

// rotatingConfig is base without its own credentials, with a transport that
// asks current for the client certificate at every TLS handshake and a
// dialer whose connections can all be closed at once.
func rotatingConfig(base *rest.Config, current func() *tls.Certificate) (*rest.Config, *connrotation.Dialer, error) {
	cfg := rest.AnonymousClientConfig(base)
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building the TLS configuration for the API server: %w", err)
	}
	if tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tlsCfg.Certificates = nil
	tlsCfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		if c := current(); c != nil {
			return c, nil
		}
		// No certificate: the request goes out anonymous and is refused,
		// rather than the handshake failing with a confusing TLS error.
		return &tls.Certificate{}, nil
	}
	d := newConnDialer(cfg.Dial)
	proxy := cfg.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	cfg.Transport = utilnet.SetTransportDefaults(&http.Transport{
		Proxy:               proxy,
		TLSHandshakeTimeout: 10 * time.Second,
		TLSClientConfig:     tlsCfg,
		MaxIdleConnsPerHost: 25,
		DialContext:         d.DialContext,
	})
	// The transport carries all TLS settings; rest refuses both at once.
	cfg.TLSClientConfig = rest.TLSClientConfig{}
	cfg.Dial, cfg.Proxy = nil, nil
	return cfg, d, nil
}

func ttlSeconds(c *tls.Certificate, now time.Time) float64 {
	if c == nil || c.Leaf == nil {
		return math.Inf(1)
	}
	return math.Trunc(c.Leaf.NotAfter.Sub(now).Seconds())
}

// failureHook is the certificate manager's renewal-failure counter, which is
// also the only signal it gives that a renewal failed.
type failureHook struct {
	counter   prometheus.Counter
	onFailure func()
}

func (h failureHook) Inc() {
	h.counter.Inc()
	h.onFailure()
}

// warner logs every renewal failure and posts a Warning event on the Node at
// most every few minutes, with how long the certificate still has.
type warner struct {
	logger   klog.Logger
	clk      clock.Clock
	nodeName string
	mu       sync.Mutex
	rec      record.EventRecorder
	last     map[string]time.Time
}

const eventEvery = 5 * time.Minute

func newWarner(logger klog.Logger, clk clock.Clock, nodeName string) *warner {
	return &warner{logger: logger, clk: clk, nodeName: nodeName, last: map[string]time.Time{}}
}

func (w *warner) setRecorder(rec record.EventRecorder) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rec = rec
}

// renewalFailed reports one failed renewal of the "client" or "serving" certificate.
func (w *warner) renewalFailed(which string, cur *tls.Certificate) {
	now := w.clk.Now()
	left := "no valid certificate"
	if cur != nil && cur.Leaf != nil {
		left = fmt.Sprintf("the current one expires at %s (in %s)", cur.Leaf.NotAfter.UTC().Format(time.RFC3339), cur.Leaf.NotAfter.Sub(now).Round(time.Second))
	}
	msg := fmt.Sprintf("Could not renew the %s certificate (%s); retrying with back-off. Check that its CertificateSigningRequests are approved and signed (kubectl get csr)", which, left)
	w.logger.Error(nil, msg, "certificate", which)
	w.mu.Lock()
	rec, last := w.rec, w.last[which]
	emit := rec != nil && (last.IsZero() || now.Sub(last) >= eventEvery)
	if emit {
		w.last[which] = now
	}
	w.mu.Unlock()
	if emit {
		reason := "ClientCertificateRenewalFailed"
		if which == "serving" {
			reason = "ServingCertificateRenewalFailed"
		}
		rec.Event(&v1.ObjectReference{Kind: "Node", Name: w.nodeName, UID: types.UID(w.nodeName)}, v1.EventTypeWarning, reason, msg)
	}
}
