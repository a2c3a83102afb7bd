#!/usr/bin/env bash
# apiserver.sh start|stop: etcd and kube-apiserver on the host's loopback for the nodelet VM
# (binaries from RIG_BIN_DIR, as built by test/rig/build-bins.sh), with a PKI of their own in
# $VM_DIR/api, and the pods of guest/api-pods created, bound to node nodelet-vm. The guest reaches
# the apiserver as https://10.0.2.100:6443 through qemu's user networking (a guestfwd to
# 127.0.0.1:VM_API_PORT); $VM_DIR/api/guest.kubeconfig is the node's kubeconfig for that address.
# No controller manager: pods set automountServiceAccountToken: false and the ServiceAccount
# admission plugin is off.
# Env: VM_DIR, RIG_BIN_DIR, VM_API_PORT (26443), VM_ETCD_PORT (23990).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_DIR=${VM_DIR:-/var/lib/nodelet-vm}
A=$VM_DIR/api
VM_API_PORT=${VM_API_PORT:-26443}
VM_ETCD_PORT=${VM_ETCD_PORT:-23990}
NODE=nodelet-vm
log() { echo "[apiserver $(date -u +%H:%M:%S)] $*" >&2; }

stop() {
	local name pid
	for name in kube-apiserver etcd; do
		[[ -f "$A/$name.pid" ]] || continue
		pid=$(cat "$A/$name.pid")
		# Only our own daemon: its command line names our dir.
		if [[ -d /proc/$pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$A"; then
			kill "$pid" 2>/dev/null || true
			for _ in $(seq 1 50); do [[ -d /proc/$pid ]] || break; sleep 0.1; done
		fi
		rm -f "$A/$name.pid"
	done
}
if [[ "${1:-}" == stop ]]; then
	stop
	exit 0
fi
[[ "${1:-}" == start ]] || { echo "usage: apiserver.sh start|stop" >&2; exit 2; }
for b in etcd kube-apiserver kubectl; do
	[[ -x "$RIG_BIN_DIR/$b" ]] || { log "missing $RIG_BIN_DIR/$b"; exit 1; }
done
stop
mkdir -p "$A/pki"
P=$A/pki
# cert NAME SUBJ [SANS] [USAGE]
cert() {
	[[ -f "$P/$1.crt" ]] && return 0
	openssl genrsa -out "$P/$1.key" 2048 2>/dev/null
	openssl req -new -key "$P/$1.key" -subj "$2" -out "$P/$1.csr" 2>/dev/null
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=${4:-clientAuth}"
		if [[ -n "${3:-}" ]]; then echo "subjectAltName=$3"; fi
	} >"$P/$1.ext"
	openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 \
		-sha256 -extfile "$P/$1.ext" -out "$P/$1.crt" 2>/dev/null
	rm -f "$P/$1.csr" "$P/$1.ext"
}
if [[ ! -f "$P/ca.crt" ]]; then
	openssl genrsa -out "$P/ca.key" 2048 2>/dev/null
	openssl req -x509 -new -key "$P/ca.key" -subj "/CN=nodelet-vm-ca" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$P/ca.crt" 2>/dev/null
	openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
	openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
fi
cert apiserver "/CN=kube-apiserver" "IP:10.0.2.100,IP:127.0.0.1,DNS:localhost,DNS:kubernetes" serverAuth
cert admin "/O=system:masters/CN=nodelet-vm-admin"
cert node "/O=system:nodes/CN=system:node:$NODE"

# kubeconfig FILE SERVER CERT
kubeconfig() {
	cat >"$1" <<KC
apiVersion: v1
kind: Config
clusters:
- name: vm
  cluster:
    server: $2
    certificate-authority-data: $(base64 -w0 "$P/ca.crt")
users:
- name: u
  user:
    client-certificate-data: $(base64 -w0 "$P/$3.crt")
    client-key-data: $(base64 -w0 "$P/$3.key")
contexts:
- name: vm
  context: {cluster: vm, user: u}
current-context: vm
KC
	chmod 600 "$1"
}
kubeconfig "$A/admin.kubeconfig" "https://127.0.0.1:$VM_API_PORT" admin
kubeconfig "$A/guest.kubeconfig" "https://10.0.2.100:6443" node
echo "$VM_API_PORT" >"$A/port"

rm -rf "$A/etcd"
# start NAME CMD...: detached, own session, log and pid in $A.
start() {
	local name=$1
	shift
	setsid "$@" </dev/null >"$A/$name.log" 2>&1 &
	echo $! >"$A/$name.pid"
}
start etcd "$RIG_BIN_DIR/etcd" --name vm --data-dir "$A/etcd" \
	--listen-client-urls "http://127.0.0.1:$VM_ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$VM_ETCD_PORT" \
	--listen-peer-urls "http://127.0.0.1:$((VM_ETCD_PORT + 10))" \
	--initial-advertise-peer-urls "http://127.0.0.1:$((VM_ETCD_PORT + 10))" \
	--initial-cluster "vm=http://127.0.0.1:$((VM_ETCD_PORT + 10))" \
	--listen-metrics-urls "http://127.0.0.1:$((VM_ETCD_PORT + 20))" \
	--unsafe-no-fsync --log-level warn
start kube-apiserver "$RIG_BIN_DIR/kube-apiserver" \
	--advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$VM_API_PORT" \
	--etcd-servers="http://127.0.0.1:$VM_ETCD_PORT" \
	--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" \
	--client-ca-file="$P/ca.crt" \
	--authorization-mode=Node,RBAC \
	--enable-admission-plugins=NodeRestriction,Priority \
	--disable-admission-plugins=ServiceAccount \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
	--service-cluster-ip-range=10.97.0.0/16 \
	--endpoint-reconciler-type=none \
	--profiling=false --v=1
K=("$RIG_BIN_DIR/kubectl" --kubeconfig="$A/admin.kubeconfig")
for _ in $(seq 1 120); do
	"${K[@]}" get --raw=/readyz >/dev/null 2>&1 && break
	sleep 0.5
done
"${K[@]}" get --raw=/readyz >/dev/null || { tail -20 "$A/kube-apiserver.log" >&2; log "kube-apiserver not ready"; exit 1; }
log "kube-apiserver ready on 127.0.0.1:$VM_API_PORT"
for f in "$HERE"/guest/api-pods/*.yaml; do
	sed "s/^spec:$/spec:\n  nodeName: $NODE/" "$f"
	echo "---"
done | "${K[@]}" create -f - >&2
