package agent

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/certificate"
	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/node"
)

// heartbeatReset makes the node controller close every connection of the API
// clients when Lease or status updates fail repeatedly, as upstream does after
// a half-dead TCP connection to the API server: the next requests dial anew.
// Standalone (no credential): nothing to close.
func heartbeatReset(credential *certificate.Client) node.Option {
	if credential == nil {
		return func(*node.Controller) {}
	}
	return node.WithOnRepeatedHeartbeatFailure(func() {
		klog.InfoS("Closing the API client connections after repeated heartbeat failures")
		credential.CloseAllConns()
	})
}

// newClientCredential is the node's API credential from --kubeconfig,
// --bootstrap-kubeconfig, --cert-dir and rotateCertificates. When the TLS
// bootstrap is needed it blocks here until the client certificate is
// issued: nothing that talks to the API server could work before.
func newClientCredential(ctx context.Context, opts *config.Options, nodeName string, reg prometheus.Registerer) (*certificate.Client, error) {
	return certificate.NewClient(ctx, certificate.ClientOptions{
		Kubeconfig:          opts.Kubeconfig,
		BootstrapKubeconfig: opts.BootstrapKubeconfig,
		CertDir:             opts.CertDir,
		NodeName:            nodeName,
		RotateCertificates:  opts.Config.RotateCertificates,
		Registerer:          reg,
	})
}

// newServingCertificate is the certificate of the kubelet API port:
// serverTLSBootstrap (CSR with the Node's addresses as SANs, rotated),
// tlsCertFile/tlsPrivateKeyFile, or a self-signed pair in the cert dir. Its
// GetCertificate is meant for the HTTPS server's tls.Config.
func newServingCertificate(ctx context.Context, opts *config.Options, nodeName, hostname string, client kubernetes.Interface, node func() *v1.Node, reg prometheus.Registerer) (*certificate.Serving, error) {
	kc := opts.Config
	return certificate.NewServing(ctx, certificate.ServingOptions{
		NodeName:           nodeName,
		Hostname:           hostname,
		CertDir:            opts.CertDir,
		TLSCertFile:        kc.TLSCertFile,
		TLSPrivateKeyFile:  kc.TLSPrivateKeyFile,
		ServerTLSBootstrap: kc.ServerTLSBootstrap,
		Client:             client,
		NodeAddresses: func() []v1.NodeAddress {
			if n := node(); n != nil {
				return n.Status.Addresses
			}
			return nil
		},
		Registerer: reg,
	})
}
