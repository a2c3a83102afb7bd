package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/server"
)

// apiServerDeps are the parts the kubelet API serves from.
type apiServerDeps struct {
	nodeName string
	// authClient makes the TokenReviews and SubjectAccessReviews (newAuthClient);
	// nil in standalone mode.
	authClient kubernetes.Interface
	runtime    server.Runtime
	// getCertificate is the serving certificate (tlsCertFile, self-signed or rotated).
	getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	pods           func() []*v1.Pod
	podStatus      func(types.UID) (v1.PodStatus, bool)
	pleg, loop     healthChecker
	metrics        *prometheus.Registry   // served on /metrics; also gets the kubelet_http_* metrics
	probeMetrics   prometheus.Gatherer    // served on /metrics/probes; may be nil
	summary        server.SummaryProvider // nil: the stats endpoints answer 503
	cadvisor       server.CadvisorSource  // nil: /metrics/cadvisor answers 503
	machine        *server.MachineInfo    // the machine_* series of /metrics/cadvisor
	clock          clock.WithTicker
	// systemLogDir is what /logs/ serves; empty is the node's /var/log.
	systemLogDir string
	// journalctlPath runs the node log query; empty is journalctl from $PATH.
	journalctlPath string
	// showHiddenMetrics serves the hidden (long-deprecated) metrics too
	// (showHiddenMetricsForVersion).
	showHiddenMetrics bool
	// tracer traces the requests; nil when tracing is off.
	tracer trace.TracerProvider
}

// newAPIServer builds the kubelet API on port/readOnlyPort with the configured
// authentication and authorization and opens its ports (nil when both are 0). As upstream, webhook
// authentication or authorization without an API client is a start-up error.
func newAPIServer(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration, s config.ServerSettings, d apiServerDeps) (*server.Listeners, error) {
	// Refused even when no port is served: a bad value is an error, never ignored.
	curves, err := server.TLSCurvePreferences(kc.TLSCurvePreferences)
	if err != nil {
		return nil, err
	}
	port := kc.Port
	if !s.Enable {
		// As upstream, enableServer turns off the secured port only; the read-only
		// port follows readOnlyPort alone.
		klog.FromContext(ctx).Info("enableServer is false: the kubelet API port is not served", "port", kc.Port)
		port = 0
	}
	if port == 0 && kc.ReadOnlyPort == 0 {
		return nil, nil
	}
	authn, err := newAuthenticator(kc, s, d.authClient, d.clock)
	if err != nil {
		return nil, err
	}
	authz, err := newAuthorizer(kc, d.authClient, d.clock)
	if err != nil {
		return nil, err
	}
	suites, err := server.CipherSuites(kc.TLSCipherSuites)
	if err != nil {
		return nil, err
	}
	minVersion, err := server.TLSVersion(kc.TLSMinVersion)
	if err != nil {
		return nil, err
	}
	gates, err := config.FeatureGates(kc)
	if err != nil {
		return nil, fmt.Errorf("reading the feature gates for the kubelet API: %w", err)
	}
	pods := func() []*v1.Pod {
		known := d.pods()
		out := make([]*v1.Pod, 0, len(known))
		for _, p := range known {
			// The spec the node runs, with the status it last computed (as upstream's /pods).
			if st, ok := d.podStatus(p.UID); ok {
				p = p.DeepCopy()
				p.Status = st
			}
			out = append(out, p)
		}
		return out
	}
	srv := server.New(server.Config{
		NodeName:                d.nodeName,
		Address:                 kc.Address,
		Port:                    port,
		ReadOnlyPort:            kc.ReadOnlyPort,
		GetCertificate:          d.getCertificate,
		CipherSuites:            suites,
		MinVersion:              minVersion,
		CurvePreferences:        curves,
		ShowHiddenMetrics:       d.showHiddenMetrics,
		EnableDebuggingHandlers: s.EnableDebuggingHandlers,
		// Upstream's defaults: every handler on, contention profiling off.
		EnableProfilingHandler:    s.EnableProfilingHandler,
		EnableContentionProfiling: kc.EnableContentionProfiling,
		EnableDebugFlagsHandler:   s.EnableDebugFlagsHandler,
		EnableSystemLogHandler:    s.EnableSystemLogHandler,
		SystemLogDir:              d.systemLogDir,
		// As upstream, the query needs the NodeLogQuery gate (GA, locked on in v1.37).
		EnableSystemLogQuery: s.EnableSystemLogQuery && gates.Enabled("NodeLogQuery"),
		JournalctlPath:       d.journalctlPath,
		Configz:              configz(kc),
	}, server.Deps{
		Authenticator:  authn,
		Authorizer:     authz,
		Runtime:        d.runtime,
		Pods:           pods,
		Health:         []server.HealthCheck{{Name: "pleg", Checker: d.pleg}, {Name: "syncloop", Checker: d.loop}},
		Metrics:        d.metrics,
		Registerer:     d.metrics,
		ProbeMetrics:   d.probeMetrics,
		Summary:        d.summary,
		Cadvisor:       d.cadvisor,
		Machine:        d.machine,
		Clock:          d.clock,
		TracerProvider: d.tracer,
	})
	return srv.Listen(ctx)
}

// The authentication and authorization of kubelet API callers have a client of their
// own, with its own rate limiter: a request with a bearer token not in the cache costs
// a TokenReview, and anyone who can reach the port can send random tokens. On the main
// client's limiter those reviews would starve pod status, node status and event writes;
// on this one a flood only slows the reviews of new callers (cached ones are not asked).
const (
	authClientQPS   = 20
	authClientBurst = 40
)

// newAuthClient returns the client for TokenReviews and SubjectAccessReviews: the
// node's credentials and transport (so certificate rotation applies) with a rate
// limiter of its own.
func newAuthClient(rc *rest.Config) (kubernetes.Interface, error) {
	ac := rest.CopyConfig(rc)
	ac.UserAgent = userAgent()
	ac.QPS, ac.Burst = authClientQPS, authClientBurst
	ac.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(ac.QPS, ac.Burst)
	c, err := kubernetes.NewForConfig(ac)
	if err != nil {
		return nil, fmt.Errorf("creating the API client for authentication and authorization reviews: %w", err)
	}
	return c, nil
}

func newAuthenticator(kc *kubeletconfigv1beta1.KubeletConfiguration, s config.ServerSettings, client kubernetes.Interface, clk clock.PassiveClock) (server.Authenticator, error) {
	a := kc.Authentication
	u := &server.UnionAuthenticator{Anonymous: s.AnonymousAuth}
	if f := a.X509.ClientCAFile; f != "" {
		pool, err := certutil.NewPool(f)
		if err != nil {
			return nil, fmt.Errorf("loading authentication.x509.clientCAFile %s: %w", f, err)
		}
		u.Authenticators = append(u.Authenticators, &server.X509Authenticator{Roots: pool, Clock: clk})
	}
	if s.WebhookAuth {
		if client == nil {
			return nil, errors.New("no client provided, cannot use webhook authentication (authentication.webhook.enabled needs --kubeconfig)")
		}
		u.Authenticators = append(u.Authenticators, server.NewTokenAuthenticator(client.AuthenticationV1().TokenReviews(), a.Webhook.CacheTTL.Duration, clk))
	}
	return u, nil
}

func newAuthorizer(kc *kubeletconfigv1beta1.KubeletConfiguration, client kubernetes.Interface, clk clock.PassiveClock) (server.Authorizer, error) {
	switch kc.Authorization.Mode {
	case kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow:
		return server.AlwaysAllow{}, nil
	case kubeletconfigv1beta1.KubeletAuthorizationModeWebhook, "":
		if client == nil {
			return nil, errors.New("no client provided, cannot use webhook authorization (authorization.mode Webhook needs --kubeconfig)")
		}
		w := kc.Authorization.Webhook
		return server.NewWebhookAuthorizer(client.AuthorizationV1().SubjectAccessReviews(), w.CacheAuthorizedTTL.Duration, w.CacheUnauthorizedTTL.Duration, clk), nil
	}
	return nil, fmt.Errorf("unknown authorization.mode %q (AlwaysAllow or Webhook)", kc.Authorization.Mode)
}

// maskedValue replaces a secret in /configz, as upstream masks it.
const maskedValue = "<masked>"

// configz is the effective configuration as /configz shows it: with its kind and
// version, and each staticPodURLHeader key's values masked (they are often
// credentials; the keys stay, so a merge of drop-ins can still be checked).
func configz(kc *kubeletconfigv1beta1.KubeletConfiguration) *kubeletconfigv1beta1.KubeletConfiguration {
	c := kc.DeepCopy()
	c.APIVersion, c.Kind = kubeletconfigv1beta1.SchemeGroupVersion.String(), "KubeletConfiguration"
	for k := range c.StaticPodURLHeader {
		c.StaticPodURLHeader[k] = []string{maskedValue}
	}
	return c
}
