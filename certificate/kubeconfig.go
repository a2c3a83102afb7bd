package certificate

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/nodelet/nodelet/internal/atomicfile"
)

// File names in the cert dir, as upstream.
const (
	clientPairPrefix = "kubelet-client"
	serverPairPrefix = "kubelet-server"
	// pendingKeyFile holds the bootstrap key until its CSR is issued, so a
	// restart in between reuses the key (and the CSR named after it).
	pendingKeyFile = "kubelet-client.key.tmp"
	// selfSignedCertFile and selfSignedKeyFile are the serving pair generated
	// when neither serverTLSBootstrap nor tlsCertFile is set.
	selfSignedCertFile = "kubelet.crt"
	selfSignedKeyFile  = "kubelet.key"
)

// LoadRESTConfig reads a kubeconfig file into a rest.Config (its current
// context, no overrides).
func LoadRESTConfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// CheckBootstrapKubeconfig fails at once, as the kubelet does before it
// starts anything else, when the TLS bootstrap is needed (a bootstrap
// kubeconfig is given and the kubeconfig is not usable) and the bootstrap
// kubeconfig cannot be loaded. The wording is upstream's
// (pkg/kubelet/certificate/bootstrap): "unable to load bootstrap kubeconfig:
// stat /etc/kubernetes/bootstrap-kubelet.conf: no such file or directory".
func CheckBootstrapKubeconfig(kubeconfig, bootstrapKubeconfig string, now time.Time) error {
	if bootstrapKubeconfig == "" {
		return nil
	}
	valid, _, err := KubeconfigStillValid(kubeconfig, now)
	if err != nil || valid {
		return err
	}
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: bootstrapKubeconfig}
	raw, err := rules.Load()
	if err == nil {
		_, err = clientcmd.NewNonInteractiveClientConfig(*raw, raw.CurrentContext, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
	}
	if err != nil {
		return fmt.Errorf("unable to load bootstrap kubeconfig: %w", err)
	}
	return nil
}

// KubeconfigStillValid applies the upstream rule for "is there a usable
// kubeconfig, or must nodelet bootstrap": the file must exist, load, carry a
// client certificate and key that belong together, and no certificate in it
// may have expired. A reason is returned for every "no". Only an error other
// than "does not exist" while looking at the file is returned as err: that
// stops the start-up rather than overwriting a file nodelet cannot read.
func KubeconfigStillValid(path string, now time.Time) (bool, string, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, "the kubeconfig does not exist", nil
	} else if err != nil {
		return false, "", fmt.Errorf("checking the kubeconfig %s: %w", path, err)
	}
	cfg, err := LoadRESTConfig(path)
	if err != nil {
		return false, fmt.Sprintf("the kubeconfig cannot be loaded: %v", err), nil
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return false, fmt.Sprintf("the kubeconfig's TLS files cannot be read: %v", err), nil
	}
	if len(cfg.CertData) == 0 {
		return false, "the kubeconfig has no client certificate", nil
	}
	if _, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData); err != nil {
		return false, fmt.Sprintf("the kubeconfig's client certificate and key are not a usable pair: %v", err), nil
	}
	certs, err := certutil.ParseCertsPEM(cfg.CertData)
	if err != nil {
		return false, fmt.Sprintf("the kubeconfig's client certificate cannot be parsed: %v", err), nil
	}
	for _, c := range certs {
		if now.After(c.NotAfter) {
			return false, fmt.Sprintf("the kubeconfig's client certificate expired at %s", c.NotAfter.UTC().Format(time.RFC3339)), nil
		}
	}
	return true, "", nil
}

// writeKubeconfig writes a kubeconfig with the bootstrap kubeconfig's server
// and CA and the client certificate and key in pemPath (one file, as the
// FileStore writes it), mode 0600, atomically: a torn kubeconfig would send
// the next start back to bootstrapping.
func writeKubeconfig(bootstrap *rest.Config, path, pemPath string) error {
	caFile, caData := bootstrap.CAFile, []byte(nil)
	if caFile == "" {
		caData = bootstrap.CAData
	}
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{"default-cluster": {
			Server:                   bootstrap.Host,
			InsecureSkipTLSVerify:    bootstrap.Insecure,
			CertificateAuthority:     caFile,
			CertificateAuthorityData: caData,
			TLSServerName:            bootstrap.ServerName,
		}},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{"default-auth": {
			ClientCertificate: pemPath,
			ClientKey:         pemPath,
		}},
		Contexts: map[string]*clientcmdapi.Context{"default-context": {
			Cluster:   "default-cluster",
			AuthInfo:  "default-auth",
			Namespace: "default",
		}},
		CurrentContext: "default-context",
	}
	data, err := clientcmd.Write(cfg)
	if err != nil {
		return fmt.Errorf("encoding kubeconfig %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, data, 0o600); err != nil {
		return fmt.Errorf("storing kubeconfig: %w", err)
	}
	return nil
}
