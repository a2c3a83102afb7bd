package agent

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/credentialprovider"
	"github.com/nodelet/nodelet/podruntime"
)

// credentialProviders loads the image credential provider plugins of
// --image-credential-provider-config and --image-credential-provider-bin-dir;
// nil when neither is set. Either without the other, a bad config or a
// missing executable stops the start, as upstream's kubelet exits on them.
func credentialProviders(opts *config.Options, reg prometheus.Registerer) (podruntime.CredentialProviders, error) {
	cfg, bin := opts.ImageCredentialProviderConfig, opts.ImageCredentialProviderBinDir
	if cfg == "" && bin == "" {
		return nil, nil
	}
	if cfg == "" {
		return nil, errors.New("--image-credential-provider-bin-dir is set without --image-credential-provider-config")
	}
	p, err := credentialprovider.Load(cfg, bin, credentialprovider.WithMetrics(reg))
	if err != nil {
		return nil, fmt.Errorf("setting up image credential provider plugins: %w", err)
	}
	klog.InfoS("Registered image credential provider plugins", "providers", p.Names(), "config", cfg, "binDir", bin)
	return p, nil
}
