package certificate

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// Why one bootstrap attempt failed; each comes with what the operator can do.
const (
	FailureUnauthorized = "Unauthorized"
	FailureForbidden    = "Forbidden"
	FailureUnreachable  = "Unreachable"
	FailureDenied       = "Denied"
	FailureFailed       = "Failed"
	FailureConfig       = "BootstrapKubeconfig"
	FailureAPI          = "APIError"
	FailureTimeout      = "Timeout"
	FailureInvalid      = "InvalidCertificate"
)

// BootstrapError is one failed attempt to get a client certificate with the
// bootstrap credential. Its message says what to do about it.
type BootstrapError struct {
	Reason string // one of the Failure* constants
	CSR    string // the CSR's name, when there is one
	msg    string
	err    error
}

func (e *BootstrapError) Error() string {
	if e.err == nil {
		return e.msg
	}
	return e.msg + ": " + e.err.Error()
}

func (e *BootstrapError) Unwrap() error { return e.err }

// Bootstrapper gets the node's first client certificate with the credential in
// a bootstrap kubeconfig: a CSR for system:node:<name> in group system:nodes
// with signer kubernetes.io/kube-apiserver-client-kubelet, then waits for it
// to be approved and issued.
type Bootstrapper struct {
	NodeName            string
	CertDir             string
	BootstrapKubeconfig string
	Clock               clock.Clock
	// NewClient builds the CSR client from the bootstrap kubeconfig; nil means
	// kubernetes.NewForConfig. Tests inject fake clientsets here.
	NewClient func(*rest.Config) (kubernetes.Interface, error)
	// InitialBackoff and MaxBackoff bound the wait between failed attempts
	// (defaults 2s and 1m).
	InitialBackoff, MaxBackoff time.Duration
	// WaitTimeout bounds one wait for approval (default 1h, as upstream); the
	// next attempt finds the same CSR again, since its name comes from the key.
	WaitTimeout time.Duration
	// StillWaitingEvery is how often a pending CSR is reported (default 1m).
	StillWaitingEvery time.Duration
	// OnFailure, if set, is told about every failed attempt.
	OnFailure func(*BootstrapError)
}

// Issued is a certificate obtained through the CSR API.
type Issued struct {
	CertPEM, KeyPEM []byte
	CSR             string
}

// Run retries until a certificate is issued or ctx ends. The key is kept in
// <cert-dir>/kubelet-client.key.tmp (mode 0600) across attempts and restarts;
// only a denied or failed CSR makes it generate a new one. Run never gives up
// on its own: a wrong token, a denied CSR or an unreachable API server is
// logged with what to do, and tried again with back-off.
func (b *Bootstrapper) Run(ctx context.Context) (*Issued, error) {
	logger := klog.FromContext(ctx)
	clk := b.clock()
	backoff := wait.Backoff{Duration: durationOr(b.InitialBackoff, 2*time.Second), Factor: 2, Jitter: 0.1, Steps: 64, Cap: durationOr(b.MaxBackoff, time.Minute)}
	start := clk.Now()
	for attempt := 1; ; attempt++ {
		issued, err := b.attempt(ctx)
		if err == nil {
			logger.Info("Client certificate issued through the bootstrap kubeconfig", "csr", issued.CSR, "attempts", attempt, "elapsed", clk.Since(start).Round(time.Millisecond))
			return issued, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bootstrapping the client certificate: %w", ctx.Err())
		}
		var berr *BootstrapError
		if !errors.As(err, &berr) {
			berr = &BootstrapError{Reason: FailureAPI, msg: "requesting a client certificate", err: err}
		}
		if berr.Reason == FailureDenied || berr.Reason == FailureFailed || berr.Reason == FailureInvalid {
			// That key's CSR can never succeed: the next attempt needs a new key (and so a new CSR name).
			if rmErr := os.Remove(b.pendingKeyPath()); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
				logger.Error(rmErr, "Removing the key of a refused certificate signing request", "path", b.pendingKeyPath())
			}
		}
		if b.OnFailure != nil {
			b.OnFailure(berr)
		}
		delay := backoff.Step()
		logger.Error(berr, "Could not get a client certificate with the bootstrap kubeconfig; nodelet keeps its key and tries again",
			"reason", berr.Reason, "csr", berr.CSR, "bootstrapKubeconfig", b.BootstrapKubeconfig, "attempt", attempt, "retryIn", delay.Round(time.Millisecond))
		select {
		case <-clk.After(delay):
		case <-ctx.Done():
			return nil, fmt.Errorf("bootstrapping the client certificate: %w", ctx.Err())
		}
	}
}

func (b *Bootstrapper) clock() clock.Clock {
	if b.Clock == nil {
		return clock.RealClock{}
	}
	return b.Clock
}

func (b *Bootstrapper) pendingKeyPath() string { return filepath.Join(b.CertDir, pendingKeyFile) }

// attempt is one try: read the bootstrap kubeconfig (again: an operator may
// have fixed the token), create or find the CSR, wait for the certificate.
func (b *Bootstrapper) attempt(ctx context.Context) (*Issued, error) {
	logger := klog.FromContext(ctx)
	cfg, err := LoadRESTConfig(b.BootstrapKubeconfig)
	if err != nil {
		return nil, &BootstrapError{Reason: FailureConfig, msg: fmt.Sprintf("reading the bootstrap kubeconfig %s (fix or replace the file; it is read again on every attempt)", b.BootstrapKubeconfig), err: err}
	}
	newClient := b.NewClient
	if newClient == nil {
		newClient = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	client, err := newClient(cfg)
	if err != nil {
		return nil, &BootstrapError{Reason: FailureConfig, msg: "creating the API client from the bootstrap kubeconfig " + b.BootstrapKubeconfig, err: err}
	}
	if err := os.MkdirAll(b.CertDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the cert dir %s: %w", b.CertDir, err)
	}
	keyPEM, err := loadOrGeneratePendingKey(logger, b.pendingKeyPath())
	if err != nil {
		return nil, err
	}

	req, err := newClientCSR(b.NodeName, keyPEM)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	name, uid, err := csr.RequestCertificateWithContext(rctx, client, req.csrPEM, req.name, certificatesv1.KubeAPIServerClientKubeletSignerName, nil, req.usages, req.key)
	cancel()
	if err != nil {
		return nil, classify(err, cfg.Host, b.BootstrapKubeconfig, req.name, "creating the certificate signing request")
	}
	logger.Info("Certificate signing request submitted; waiting for it to be approved and issued", "csr", name, "signer", certificatesv1.KubeAPIServerClientKubeletSignerName, "subject", "system:node:"+b.NodeName)

	wctx, cancel := context.WithTimeout(ctx, durationOr(b.WaitTimeout, time.Hour))
	defer cancel()
	certPEM, err := waitForCertificate(wctx, client, name, uid, b.clock(), durationOr(b.StillWaitingEvery, time.Minute))
	if err != nil {
		if ctx.Err() == nil && wctx.Err() != nil {
			return nil, &BootstrapError{Reason: FailureTimeout, CSR: name, msg: fmt.Sprintf("certificate signing request %s was not issued in time: approve it (kubectl certificate approve %s), or check that kube-controller-manager runs the csrapproving and csrsigning controllers", name, name)}
		}
		return nil, classify(err, cfg.Host, b.BootstrapKubeconfig, name, "waiting for the certificate")
	}
	if err := checkIssued(certPEM, keyPEM, "system:node:"+b.NodeName, b.clock().Now()); err != nil {
		return nil, &BootstrapError{Reason: FailureInvalid, CSR: name, msg: "the certificate issued for " + name + " is not usable", err: err}
	}
	return &Issued{CertPEM: certPEM, KeyPEM: keyPEM, CSR: name}, nil
}

// loadOrGeneratePendingKey returns the bootstrap key kept in path, or a new
// one written there. nodelet alone writes that file, so one it cannot parse
// (empty or cut short by a crash while an older version wrote it) is replaced
// rather than failing every attempt forever.
func loadOrGeneratePendingKey(logger klog.Logger, path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		_, perr := keyutil.ParsePrivateKeyPEM(data)
		if perr == nil {
			logger.V(2).Info("Reusing the pending bootstrap key", "path", path)
			return data, nil
		}
		logger.Info("The pending bootstrap key cannot be parsed (a write was interrupted); generating a new one, so a new certificate signing request is filed",
			"path", path, "size", len(data), "err", perr)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading the pending bootstrap key %s: %w", path, err)
	}
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return nil, fmt.Errorf("generating the bootstrap key: %w", err)
	}
	if err := atomicfile.WriteFile(path, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("storing the bootstrap key: %w", err)
	}
	logger.V(2).Info("Generated the bootstrap key", "path", path)
	return keyPEM, nil
}

type clientCSR struct {
	name   string
	csrPEM []byte
	usages []certificatesv1.KeyUsage
	key    crypto.Signer
}

// newClientCSR builds the node's client CSR for the key. Its name is derived
// from the public key, subject and usages, so the same key always names the
// same CSR: after a restart nodelet finds its pending CSR instead of filing a
// second one.
func newClientCSR(nodeName string, keyPEM []byte) (*clientCSR, error) {
	parsed, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("parsing the bootstrap key: %w", err)
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the bootstrap key (%T) cannot sign", parsed)
	}
	subject := pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}}
	csrPEM, err := certutil.MakeCSR(key, &subject, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("building the certificate signing request: %w", err)
	}
	usages := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	if _, isRSA := key.(*rsa.PrivateKey); isRSA {
		usages = append(usages, certificatesv1.UsageKeyEncipherment)
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, fmt.Errorf("encoding the bootstrap public key: %w", err)
	}
	h := sha256.New()
	for _, part := range append([][]byte{pub, []byte(subject.CommonName), []byte(subject.Organization[0])}, usageBytes(usages)...) {
		// Length-prefixed, so that no two different inputs hash the same stream.
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	return &clientCSR{
		name:   "node-csr-" + base64.RawURLEncoding.EncodeToString(h.Sum(nil)),
		csrPEM: csrPEM,
		usages: usages,
		key:    key,
	}, nil
}

func usageBytes(us []certificatesv1.KeyUsage) [][]byte {
	out := make([][]byte, len(us))
	for i, u := range us {
		out[i] = []byte(u)
	}
	return out
}

// waitForCertificate watches the CSR until it carries a certificate, is
// denied or fails. It looks again every few seconds too, so a watch that
// misses an event (or is not allowed) only delays the answer.
func waitForCertificate(ctx context.Context, client kubernetes.Interface, name string, uid types.UID, clk clock.Clock, reportEvery time.Duration) ([]byte, error) {
	logger := klog.FromContext(ctx).WithValues("csr", name)
	api := client.CertificatesV1().CertificateSigningRequests()
	start := clk.Now()
	lastReport := start
	approvedSeen := false
	check := func(c *certificatesv1.CertificateSigningRequest) ([]byte, error) {
		if c.Name != name {
			return nil, nil
		}
		if c.UID != uid {
			return nil, &BootstrapError{Reason: FailureFailed, CSR: name, msg: fmt.Sprintf("certificate signing request %s was replaced by another object with the same name", name)}
		}
		cert, approved, err := csrOutcome(c)
		if err != nil {
			return nil, err
		}
		if approved && !approvedSeen {
			approvedSeen = true
			logger.Info("Certificate signing request approved", "waited", clk.Since(start).Round(time.Millisecond))
		}
		if len(cert) > 0 {
			logger.Info("Certificate signing request issued", "waited", clk.Since(start).Round(time.Millisecond))
		}
		return cert, nil
	}
	const recheck = 5 * time.Second
	for {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		c, err := api.Get(gctx, name, metav1.GetOptions{})
		cancel()
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &BootstrapError{Reason: FailureFailed, CSR: name, msg: fmt.Sprintf("certificate signing request %s was deleted before it was issued", name)}
			}
			return nil, err
		}
		if cert, err := check(c); err != nil || len(cert) > 0 {
			return cert, err
		}
		if clk.Since(lastReport) >= reportEvery {
			lastReport = clk.Now()
			logger.Info("Still waiting for the certificate signing request to be approved: approve it with 'kubectl certificate approve', or check that kube-controller-manager auto-approves node client CSRs",
				"approved", approvedSeen, "waited", clk.Since(start).Round(time.Second))
		}
		w, err := api.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: c.ResourceVersion})
		if err != nil {
			// Not fatal: polling alone gets there too.
			logger.V(2).Info("Could not watch the certificate signing request; polling", "err", err)
			w = watch.NewEmptyWatch()
		}
		cert, err := func() ([]byte, error) {
			defer w.Stop()
			timer := clk.NewTimer(recheck)
			defer timer.Stop()
			events := w.ResultChan()
			for {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-timer.C():
					return nil, nil
				case ev, ok := <-events:
					if !ok {
						// Watch closed (or empty): wait for the re-check rather than spin.
						events = nil
						continue
					}
					obj, isCSR := ev.Object.(*certificatesv1.CertificateSigningRequest)
					if !isCSR {
						continue
					}
					if ev.Type == watch.Deleted && obj.Name == name {
						return nil, &BootstrapError{Reason: FailureFailed, CSR: name, msg: fmt.Sprintf("certificate signing request %s was deleted before it was issued", name)}
					}
					if cert, err := check(obj); err != nil || len(cert) > 0 {
						return cert, err
					}
				}
			}
		}()
		if err != nil || len(cert) > 0 {
			return cert, err
		}
	}
}

// csrOutcome reads a CSR's status: the certificate once issued, whether it is
// approved, and an error when it was denied or failed.
func csrOutcome(c *certificatesv1.CertificateSigningRequest) (cert []byte, approved bool, err error) {
	for _, cond := range c.Status.Conditions {
		switch cond.Type {
		case certificatesv1.CertificateDenied:
			return nil, false, &BootstrapError{Reason: FailureDenied, CSR: c.Name, msg: fmt.Sprintf("certificate signing request %s was denied (reason %q, message %q): see who denied it with 'kubectl get csr %s -o yaml'; nodelet asks again with a new key",
				c.Name, cond.Reason, cond.Message, c.Name)}
		case certificatesv1.CertificateFailed:
			return nil, false, &BootstrapError{Reason: FailureFailed, CSR: c.Name, msg: fmt.Sprintf("signing certificate signing request %s failed (reason %q, message %q): check kube-controller-manager's csrsigning controller and its --cluster-signing-cert-file; nodelet asks again with a new key",
				c.Name, cond.Reason, cond.Message)}
		case certificatesv1.CertificateApproved:
			approved = true
		}
	}
	if approved && len(c.Status.Certificate) > 0 {
		return c.Status.Certificate, true, nil
	}
	return nil, approved, nil
}

// classify turns an API error into a BootstrapError that says what to do.
func classify(err error, server, bootstrapKubeconfig, csrName, doing string) error {
	var berr *BootstrapError
	if errors.As(err, &berr) {
		return err
	}
	switch {
	case apierrors.IsUnauthorized(err):
		return &BootstrapError{Reason: FailureUnauthorized, CSR: csrName, err: err, msg: fmt.Sprintf("%s: the API server rejected the bootstrap credential in %s (401 Unauthorized): the bootstrap token is wrong or expired; create a new one on a control-plane node ('kubeadm token create') and put it in that file, which nodelet reads again on its next attempt", doing, bootstrapKubeconfig)}
	case apierrors.IsForbidden(err):
		return &BootstrapError{Reason: FailureForbidden, CSR: csrName, err: err, msg: fmt.Sprintf("%s: the bootstrap credential may not use certificate signing requests (403 Forbidden): bind the ClusterRole system:node-bootstrapper to its group (kubeadm: system:bootstrappers:kubeadm:default-node-token)", doing)}
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return &BootstrapError{Reason: FailureAPI, CSR: csrName, err: err, msg: doing + ": the API server answered with an error"}
	}
	return &BootstrapError{Reason: FailureUnreachable, CSR: csrName, err: err, msg: fmt.Sprintf("%s: cannot reach the API server at %s: check the server URL in %s, the network, and that kube-apiserver is running", doing, server, bootstrapKubeconfig)}
}

// checkIssued verifies that the certificate belongs to the key, names the
// node and has not already expired (a CSR reused after a restart can be old).
func checkIssued(certPEM, keyPEM []byte, commonName string, now time.Time) error {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("certificate and key do not match: %w", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("parsing the certificate: %w", err)
	}
	if leaf.Subject.CommonName != commonName {
		return fmt.Errorf("certificate is for %q, not %q", leaf.Subject.CommonName, commonName)
	}
	if !now.Before(leaf.NotAfter) {
		return fmt.Errorf("certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return nil
}

func durationOr(d, dflt time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return dflt
}
