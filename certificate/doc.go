// Package certificate gives nodelet its TLS identities the way the upstream
// kubelet does:
//
//   - the client credential: the decision between --kubeconfig and
//     --bootstrap-kubeconfig, the TLS bootstrap (a CertificateSigningRequest
//     with signer kubernetes.io/kube-apiserver-client-kubelet, the key kept in
//     --cert-dir), the kubeconfig written to point at
//     <cert-dir>/kubelet-client-current.pem, and rotation before expiry
//     (rotateCertificates) with a transport that uses the new certificate for
//     new connections without a restart;
//   - the serving certificate for :10250: a CSR with signer
//     kubernetes.io/kubelet-serving when serverTLSBootstrap is set, the
//     tlsCertFile/tlsPrivateKeyFile pair (reloaded when it changes), or a
//     self-signed kubelet.crt/kubelet.key in the cert dir.
//
// Rotation itself is client-go's certificate.Manager (jittered 70–90% of the
// lifetime) over its FileStore (kubelet-client-<date>.pem and the
// kubelet-client-current.pem symlink), so the files on disk are the upstream
// kubelet's and a node can switch agents.
package certificate
