#!/usr/bin/env bash
# up.sh: starts the e2e rig on this machine, with no systemd and no registry:
#   PKI (openssl) -> etcd -> kube-apiserver (127.0.0.1:6443) -> kube-controller-manager
#   -> kube-scheduler -> containerd (private socket, root, state; CRI with bridge CNI)
#   -> local images imported.
# and writes $RIG_DIR/rig.env for the e2e framework. Runs as root.
#
# Idempotent-ish: a component whose pidfile names a live process is left running; the PKI and
# data dirs are kept. `up.sh --fresh` first runs down.sh and wipes etcd, containerd and CNI
# state (keeping the PKI), for a clean cluster.
#
# Env: RIG_DIR (/var/lib/nodelet-rig), NODE_NAME (nodelet-e2e), RIG_BIN_DIR (from build-bins.sh),
#      ETCD_PORT (23790), APISERVER_PORT (6443), KCM_PORT (20257), KCM_CONTROLLERS,
#      RIG_SIGNING_DURATION (3m: kcm's --cluster-signing-duration for CSR-issued certs),
#      CNI_BRIDGE (nodelet0), POD_CIDR (10.244.0.0/24), NODELET_PORT (10250),
#      NODELET_HEALTHZ_PORT (10248): the last four let a second rig run beside the first,
#      with SCHEDULER_PORT (20259), REGISTRY_PORT (5000) and CGROUP_ROOT ("": the node agent's
#      cgroupRoot; a second rig sets its own, e.g. /nodelet-rig-conf, so that neither rig's node
#      agent ever sees the other's pod cgroups; up.sh creates it in every hierarchy).
#      RIG_RUNTIME: containerd2 (default: 2.4.2 built by build-containerd.sh from
#      github.com/containerd/containerd/v2, config version 3, state in $RIG_DIR/containerd2) or
#      containerd1.6 (Debian's 1.6.20, end of life, config version 2, state in
#      $RIG_DIR/containerd). Switching runtimes needs `up.sh --fresh`.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

RIG_DIR=${RIG_DIR:-/var/lib/nodelet-rig}
NODE_NAME=${NODE_NAME:-nodelet-e2e}
ETCD_PORT=${ETCD_PORT:-23790}
ETCD_PEER_PORT=$((ETCD_PORT + 10))
APISERVER_PORT=${APISERVER_PORT:-6443}
KCM_PORT=${KCM_PORT:-20257}
SCHEDULER_PORT=${SCHEDULER_PORT:-20259}
RIG_RUNTIME=${RIG_RUNTIME:-containerd2}
CGROUP_ROOT=${CGROUP_ROOT:-}
# serviceaccount + serviceaccount-token: the default SA and its tokens; root-ca-cert-publisher:
# kube-root-ca.crt, which every projected kube-api-access volume needs; namespace: namespace
# deletion; garbagecollector: ownerReferences. TLS bootstrap as in a kubeadm cluster: csrsigning,
# csrapproving (auto-approves node client CSRs), csrcleaner, bootstrapsigner and tokencleaner.
# Claims: the persistent-volume binder (static PersistentVolumes), the pvc and pv protection
# controllers (they remove the finalizers the API server's admission adds, so deletions finish) and
# the ephemeral-volume controller (the claims of generic ephemeral volumes). CSI volumes: the
# attach-detach controller (VolumeAttachments for drivers with attachRequired, and the Node's
# status.volumesAttached the node agent waits for) and the expander (claim resizes).
KCM_CONTROLLERS=${KCM_CONTROLLERS:-serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,namespace-controller,garbage-collector-controller,certificatesigningrequest-signing-controller,certificatesigningrequest-approving-controller,certificatesigningrequest-cleaner-controller,bootstrap-signer-controller,token-cleaner-controller,persistentvolume-binder-controller,persistentvolumeclaim-protection-controller,persistentvolume-protection-controller,ephemeral-volume-controller,persistentvolume-attach-detach-controller,persistentvolume-expander-controller}
# Lifetime of certificates kcm signs from CSRs. Short, so that a client certificate rotates (at a
# jittered 70-90% of its lifetime, which starts 5m back: kcm backdates NotBefore by 5m) within an
# e2e test: 3m gives rotation 0.6-2.2 min after issuance. Below ~2m10s the deadline would fall
# before issuance and rotation would loop.
RIG_SIGNING_DURATION=${RIG_SIGNING_DURATION:-3m}
# A second rig on the same machine needs its own bridge, pod range and node agent ports.
CNI_BRIDGE=${CNI_BRIDGE:-nodelet0}
POD_CIDR=${POD_CIDR:-10.244.0.0/24}
NODELET_PORT=${NODELET_PORT:-10250}
NODELET_HEALTHZ_PORT=${NODELET_HEALTHZ_PORT:-10248}
SERVICE_CIDR=10.96.0.0/16
BUSYBOX_IMAGE=nodelet.local/busybox:latest
PAUSE_IMAGE=nodelet.local/pause:latest

PKI=$RIG_DIR/pki
LOGS=$RIG_DIR/logs
RUN=$RIG_DIR/run
BIN=$RIG_DIR/bin
SOCK=$RUN/containerd.sock

log() { echo "[up $(date -u +%H:%M:%S)] $*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}

if [[ $(id -u) != 0 ]]; then die "must run as root"; fi
case $RIG_RUNTIME in
containerd1.6 | containerd2) ;;
*) die "RIG_RUNTIME=$RIG_RUNTIME: want containerd1.6 or containerd2" ;;
esac

if [[ "${1:-}" == "--fresh" ]]; then
	log "--fresh: stopping the rig and wiping its state (PKI kept)"
	RIG_DIR=$RIG_DIR bash "$HERE/down.sh"
	rm -rf "${RIG_DIR:?}/etcd" "$RIG_DIR/containerd" "$RIG_DIR/containerd2" "$RIG_DIR/cni" "$RIG_DIR/nodelet" "$LOGS"
fi

mkdir -p "$RIG_DIR" "$PKI" "$LOGS" "$RUN" "$BIN"

if [[ -z "${RIG_BIN_DIR:-}" ]]; then
	RIG_BIN_DIR=$(bash "$HERE/build-bins.sh" | tail -1)
fi
for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl; do
	[[ -x "$RIG_BIN_DIR/$b" ]] || die "$RIG_BIN_DIR/$b missing: run test/rig/build-bins.sh"
done
KUBECTL=$RIG_BIN_DIR/kubectl

# ---------------------------------------------------------------- process helpers
# alive NAME: the pidfile names a live process whose command line mentions RIG_DIR.
alive() {
	local pidf=$RUN/$1.pid pid
	[[ -f "$pidf" ]] || return 1
	pid=$(cat "$pidf")
	[[ -n "$pid" && -d /proc/$pid ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$RIG_DIR"
}

# start NAME CMD...: runs CMD detached (own session, survives this script), logs to
# $LOGS/NAME.log, pid in $RUN/NAME.pid.
start() {
	local name=$1
	shift
	if alive "$name"; then
		log "$name already running (pid $(cat "$RUN/$name.pid"))"
		return 0
	fi
	log "starting $name"
	echo "=== $(date -u +%FT%TZ) starting: $*" >>"$LOGS/$name.log"
	# The daemon must not inherit the caller's descriptors beyond stdio: a lock such as
	# `flock /run/nodelet-rig.lock up.sh` would otherwise be held for the daemon's lifetime.
	(
		for fd in /proc/$BASHPID/fd/*; do
			fd=${fd##*/}
			((fd > 2)) && eval "exec $fd>&-"
		done
		exec setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1
	) &
	echo $! >"$RUN/$name.pid"
}

# wait_until SECONDS WHAT CMD...: polls CMD until it succeeds.
wait_until() {
	local timeout=$1 what=$2 deadline
	shift 2
	deadline=$((SECONDS + timeout))
	until "$@" >/dev/null 2>&1; do
		if ((SECONDS >= deadline)); then
			die "timed out after ${timeout}s waiting for $what"
		fi
		sleep 0.5
	done
	log "$what: ok"
}

# check_alive NAME: fails with the log tail when NAME died.
check_alive() {
	if ! alive "$1"; then
		tail -n 30 "$LOGS/$1.log" >&2 || true
		die "$1 exited; log: $LOGS/$1.log"
	fi
}

# write_if_changed FILE: stdin becomes FILE, atomically (containerd watches its CNI dir and
# must not read half a file), only when the content differs. Returns 1 when unchanged.
write_if_changed() {
	local tmp
	tmp=$(mktemp "$1.XXXXXX")
	cat >"$tmp"
	if [[ -f "$1" ]] && cmp -s "$tmp" "$1"; then
		rm -f "$tmp"
		return 1
	fi
	chmod 644 "$tmp"
	mv -f "$tmp" "$1"
}

# ---------------------------------------------------------------- PKI
# cert NAME SUBJ [SANS] [EXT_USAGE]: a key and a cert signed by $PKI/${CERT_CA:-ca}.crt, kept when
# present.
cert() {
	local name=$1 subj=$2 sans=${3:-} usage=${4:-clientAuth} ca=${CERT_CA:-ca} ext
	if [[ -f "$PKI/$name.crt" && -f "$PKI/$name.key" ]] &&
		openssl x509 -in "$PKI/$name.crt" -noout -subject -nameopt compat | grep -qF "subject=$subj" &&
		openssl verify -CAfile "$PKI/$ca.crt" "$PKI/$name.crt" >/dev/null 2>&1; then
		return 0
	fi
	log "pki: $name ($subj)"
	openssl genrsa -out "$PKI/$name.key" 2048 2>/dev/null
	openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
	ext=$PKI/$name.ext
	{
		echo "basicConstraints=critical,CA:FALSE"
		echo "keyUsage=critical,digitalSignature,keyEncipherment"
		echo "extendedKeyUsage=$usage"
		if [[ -n "$sans" ]]; then echo "subjectAltName=$sans"; fi
	} >"$ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$ext"
}

# new_ca NAME CN: makes the CA NAME unless it is there; 0 when it made one.
new_ca() {
	[[ -f "$PKI/$1.crt" && -f "$PKI/$1.key" ]] && return 1
	log "pki: CA $1"
	openssl genrsa -out "$PKI/$1.key" 2048 2>/dev/null
	openssl req -x509 -new -key "$PKI/$1.key" -subj "/CN=$2" -days 3650 -sha256 \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
		-out "$PKI/$1.crt" 2>/dev/null
}
if new_ca ca nodelet-rig-ca; then
	# A new CA invalidates every cert signed by the old one.
	find "$PKI" -name '*.crt' ! -name ca.crt ! -name front-proxy-ca.crt -delete
fi
cert apiserver "/CN=kube-apiserver" \
	"IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
	serverAuth
cert admin "/O=system:masters/CN=kubernetes-admin"
cert node "/O=system:nodes/CN=system:node:$NODE_NAME"
cert kube-controller-manager "/CN=system:kube-controller-manager"
cert kube-scheduler "/CN=system:kube-scheduler"
# The apiserver's client cert toward kubelets (logs, exec, port-forward): system:masters, so a
# kubelet's webhook authorizer allows it.
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
# The node agent's InternalIP is its default-route address (the e2e config sets no --node-ip):
# the apiserver dials it for logs, exec, port-forward and nodes/proxy (it refuses loopback
# for proxy) and verifies it against the serving cert, so the cert names it too.
NODE_IP=${NODE_IP:-$(ip -4 route get 1.1.1.1 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") { print $(i + 1); exit }}')}
if [[ -n "$NODE_IP" && -f "$PKI/kubelet-serving.crt" ]] &&
	! openssl x509 -in "$PKI/kubelet-serving.crt" -noout -ext subjectAltName 2>/dev/null | grep -qF "IP Address:$NODE_IP"; then
	rm -f "$PKI/kubelet-serving.crt"
fi
# A serving cert for the node agent's own HTTPS port, so the apiserver can verify it.
cert kubelet-serving "/O=system:nodes/CN=system:node:$NODE_NAME" \
	"IP:127.0.0.1,DNS:localhost,DNS:$NODE_NAME${NODE_IP:+,IP:$NODE_IP}" serverAuth
# metrics-server's identity toward the API server and the node agent (TestKubectlTop binds it
# to metrics-server's own ClusterRoles).
cert metrics-server "/CN=system:metrics-server"
# The aggregation layer (as kubeadm): the API server proxies to extension API servers
# (metrics-server) with a client cert from a CA of its own, so that no client cert of the
# main CA can pass for the front proxy and set the identity headers.
new_ca front-proxy-ca nodelet-rig-front-proxy-ca || true
CERT_CA=front-proxy-ca cert front-proxy-client "/CN=front-proxy-client"
if [[ ! -f "$PKI/sa.key" ]]; then
	log "pki: service-account key pair"
	openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
	openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
fi
chmod 600 "$PKI"/*.key

APISERVER_URL=https://127.0.0.1:$APISERVER_PORT
# kubeconfig NAME USER CERT: a kubeconfig for the apiserver with a client cert.
kubeconfig() {
	cat >"$RIG_DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rig
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI/ca.crt
users:
- name: $2
  user:
    client-certificate: $PKI/$3.crt
    client-key: $PKI/$3.key
contexts:
- name: rig
  context:
    cluster: rig
    user: $2
current-context: rig
EOF
	chmod 600 "$RIG_DIR/$1.kubeconfig"
}
kubeconfig admin kubernetes-admin admin
kubeconfig node "system:node:$NODE_NAME" node
kubeconfig kube-controller-manager system:kube-controller-manager kube-controller-manager
kubeconfig kube-scheduler system:kube-scheduler kube-scheduler
kubeconfig metrics-server system:metrics-server metrics-server

# ---------------------------------------------------------------- etcd
mkdir -p "$RIG_DIR/etcd"
ETCD_URL=http://127.0.0.1:$ETCD_PORT
# --unsafe-no-fsync: a throwaway test cluster; fsync on this VM's disk only slows every write.
start etcd "$RIG_BIN_DIR/etcd" --name rig --data-dir "$RIG_DIR/etcd" \
	--listen-client-urls "$ETCD_URL" --advertise-client-urls "$ETCD_URL" \
	--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
	--initial-cluster "rig=http://127.0.0.1:$ETCD_PEER_PORT" \
	--listen-metrics-urls "http://127.0.0.1:$((ETCD_PORT + 20))" \
	--unsafe-no-fsync --log-level warn
wait_until 30 "etcd $ETCD_URL/health" curl -fsS "$ETCD_URL/health"
check_alive etcd

# ---------------------------------------------------------------- kube-apiserver
start kube-apiserver "$RIG_BIN_DIR/kube-apiserver" \
	--advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
	--etcd-servers="$ETCD_URL" \
	--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
	--client-ca-file="$PKI/ca.crt" \
	--enable-bootstrap-token-auth=true \
	--authorization-mode=Node,RBAC \
	--enable-admission-plugins=NodeRestriction \
	--allow-privileged=true \
	--service-account-issuer=https://kubernetes.default.svc.cluster.local \
	--service-account-key-file="$PKI/sa.pub" \
	--service-account-signing-key-file="$PKI/sa.key" \
	--service-cluster-ip-range="$SERVICE_CIDR" \
	--endpoint-reconciler-type=none \
	--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
	--kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
	--kubelet-certificate-authority="$PKI/ca.crt" \
	--kubelet-preferred-address-types=InternalIP,Hostname,ExternalIP \
	--requestheader-client-ca-file="$PKI/front-proxy-ca.crt" \
	--requestheader-allowed-names=front-proxy-client \
	--requestheader-extra-headers-prefix=X-Remote-Extra- \
	--requestheader-group-headers=X-Remote-Group \
	--requestheader-username-headers=X-Remote-User \
	--proxy-client-cert-file="$PKI/front-proxy-client.crt" \
	--proxy-client-key-file="$PKI/front-proxy-client.key" \
	--enable-aggregator-routing=true \
	--profiling=false \
	--v=1
wait_until 90 "kube-apiserver $APISERVER_URL/readyz" \
	"$KUBECTL" --kubeconfig="$RIG_DIR/admin.kubeconfig" get --raw=/readyz
check_alive kube-apiserver

# ---------------------------------------------------------------- TLS bootstrap (as kubeadm)
# A bootstrap token (kept across runs in $PKI/bootstrap-token), its Secret, the RBAC kubeadm
# creates for joining nodes, and a bootstrap kubeconfig like /etc/kubernetes/bootstrap-kubelet.conf.
if ! grep -qxE '[a-z0-9]{6}\.[a-z0-9]{16}' "$PKI/bootstrap-token" 2>/dev/null; then
	log "pki: bootstrap token"
	# [a-z0-9]{6}.[a-z0-9]{16}, as kubeadm's tokens (no tr|head: pipefail would trip on SIGPIPE).
	echo "$(openssl rand -hex 3).$(openssl rand -hex 8)" >"$PKI/bootstrap-token"
	chmod 600 "$PKI/bootstrap-token"
fi
BOOTSTRAP_TOKEN=$(cat "$PKI/bootstrap-token")
BOOTSTRAP_GROUP=system:bootstrappers:kubeadm:default-node-token
"$KUBECTL" --kubeconfig="$RIG_DIR/admin.kubeconfig" apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: bootstrap-token-${BOOTSTRAP_TOKEN%%.*}
  namespace: kube-system
type: bootstrap.kubernetes.io/token
stringData:
  description: nodelet rig bootstrap token
  token-id: ${BOOTSTRAP_TOKEN%%.*}
  token-secret: ${BOOTSTRAP_TOKEN#*.}
  usage-bootstrap-authentication: "true"
  usage-bootstrap-signing: "true"
  auth-extra-groups: $BOOTSTRAP_GROUP
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:kubelet-bootstrap
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:node-bootstrapper}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: $BOOTSTRAP_GROUP}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-bootstrap
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: $BOOTSTRAP_GROUP}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kubeadm:node-autoapprove-certificate-rotation
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: system:nodes}]
EOF
log "bootstrap token Secret and kubeadm's node bootstrap RBAC: ok"
cat >"$RIG_DIR/bootstrap-kubelet.conf" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rig
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI/ca.crt
users:
- name: kubelet-bootstrap
  user:
    token: $BOOTSTRAP_TOKEN
contexts:
- name: rig
  context:
    cluster: rig
    user: kubelet-bootstrap
current-context: rig
EOF
chmod 600 "$RIG_DIR/bootstrap-kubelet.conf"

# ---------------------------------------------------------------- kube-controller-manager
KCM_KC=$RIG_DIR/kube-controller-manager.kubeconfig
start kube-controller-manager "$RIG_BIN_DIR/kube-controller-manager" \
	--kubeconfig="$KCM_KC" --authentication-kubeconfig="$KCM_KC" --authorization-kubeconfig="$KCM_KC" \
	--bind-address=127.0.0.1 --secure-port="$KCM_PORT" \
	--controllers="$KCM_CONTROLLERS" \
	--use-service-account-credentials=true \
	--root-ca-file="$PKI/ca.crt" \
	--service-account-private-key-file="$PKI/sa.key" \
	--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
	--cluster-signing-duration="$RIG_SIGNING_DURATION" \
	--leader-elect=false \
	--v=1
wait_until 60 "default ServiceAccount in default" \
	"$KUBECTL" --kubeconfig="$RIG_DIR/admin.kubeconfig" -n default get serviceaccount default
wait_until 60 "kube-root-ca.crt ConfigMap in default" \
	"$KUBECTL" --kubeconfig="$RIG_DIR/admin.kubeconfig" -n default get configmap kube-root-ca.crt
check_alive kube-controller-manager

# ---------------------------------------------------------------- kube-scheduler
# Pods without spec.nodeName (the upstream e2e suite's) need it; nodelet's own e2e tests set
# nodeName, which the scheduler leaves alone.
SCHED_KC=$RIG_DIR/kube-scheduler.kubeconfig
start kube-scheduler "$RIG_BIN_DIR/kube-scheduler" \
	--kubeconfig="$SCHED_KC" --authentication-kubeconfig="$SCHED_KC" --authorization-kubeconfig="$SCHED_KC" \
	--bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" \
	--leader-elect=false \
	--v=1
wait_until 60 "kube-scheduler https://127.0.0.1:$SCHEDULER_PORT/healthz" \
	curl -fsSk "https://127.0.0.1:$SCHEDULER_PORT/healthz"
check_alive kube-scheduler

# ---------------------------------------------------------------- node agent's cgroupRoot
# A cgroupRoot other than / must exist before the node agent starts (the kubelet refuses a
# missing one): in every v1 hierarchy and in the unified one.
if [[ -n "$CGROUP_ROOT" && "$CGROUP_ROOT" != / ]]; then
	for h in /sys/fs/cgroup/*/; do
		[[ -L "${h%/}" ]] && continue
		[[ -f "$h/cgroup.procs" ]] || continue
		mkdir -p "$h${CGROUP_ROOT#/}"
	done
fi

# ---------------------------------------------------------------- containerd
CNI_CONF_DIR=$RIG_DIR/cni/net.d
cd_changed=0
if [[ $RIG_RUNTIME == containerd2 ]]; then
	CONTAINERD_BIN_DIR=$(bash "$HERE/build-containerd.sh" | tail -1)
	CONTAINERD=$CONTAINERD_BIN_DIR/containerd
	CTR_BIN=$CONTAINERD_BIN_DIR/ctr
	CONTAINERD_VERSION=$(cat "$CONTAINERD_BIN_DIR/containerd.version")
	# Its own root and state: containerd 2 migrates a 1.6 metadata store one way.
	CD=$RIG_DIR/containerd2
else
	CONTAINERD_BIN_DIR=""
	CONTAINERD=$(command -v containerd)
	CTR_BIN=$(command -v ctr)
	CONTAINERD_VERSION=$("$CONTAINERD" --version | awk '{print $3}')
	CD=$RIG_DIR/containerd
fi
# The second runtime handler, runc-test (RuntimeClass and user namespace tests), runs a runc
# with idmapped mounts (Debian's 1.1.5 has none).
RUNC_TEST=$(bash "$HERE/build-runc.sh" | tail -1)/runc
mkdir -p "$CD/root" "$CD/state" "$CD/opt" "$CD/certs.d" "$CNI_CONF_DIR" "$RIG_DIR/cni/ipam" "$RIG_DIR/cdi"
if alive containerd && ! tr '\0' ' ' <"/proc/$(cat "$RUN/containerd.pid")/cmdline" | grep -qF -- "--config $CD/config.toml"; then
	die "the running containerd is not the $RIG_RUNTIME one: switching runtimes needs up.sh --fresh"
fi
if [[ $RIG_RUNTIME == containerd2 ]]; then
	write_if_changed "$CD/config.toml" <<EOF && cd_changed=1
# Written by test/rig/up.sh. containerd 2.x (config version 3), private to the rig.
version = 3
root = "$CD/root"
state = "$CD/state"
# Not the host's /etc/containerd/conf.d (containerd 2's default imports).
imports = []
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = "$RUN/containerd-debug.sock"
  level = "info"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$CD/opt"

  # NRI's socket defaults to /var/run/nri/nri.sock, which a second rig would share; the rig
  # has no NRI plugin.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"

    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"

    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "$CD/certs.d"

  [plugins.'io.containerd.cri.v1.runtime']
    # This sandbox lacks CAP_SYS_RESOURCE: without this, the pause container's oom_score_adj
    # of -998 makes every RunPodSandbox fail.
    restrict_oom_score_adj = true
    enable_selinux = false
    max_container_log_line_size = 16384
    # Sandbox network namespaces under the rig's state dir, not /var/run/netns.
    netns_mounts_under_state_dir = true
    # CDI (containerd 2's default) with the rig's own spec directory, not /etc/cdi and
    # /var/run/cdi: the DRA e2e test writes its device's spec there.
    enable_cdi = true
    cdi_spec_dirs = ["$RIG_DIR/cdi"]

    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"

      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          # Debian's runc 1.1.5 (crun refuses this hybrid cgroup host).
          BinaryName = "$(command -v runc)"
          SystemdCgroup = false

      # A second handler for RuntimeClass tests; its runc has idmapped mounts, so containerd
      # reports user_namespaces for it (and not for the default one).
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc-test]
        runtime_type = "io.containerd.runc.v2"

        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc-test.options]
          BinaryName = "$RUNC_TEST"
          SystemdCgroup = false

    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["/usr/lib/cni"]
      conf_dir = "$CNI_CONF_DIR"
      max_conf_num = 1
EOF
else
	write_if_changed "$CD/config.toml" <<EOF && cd_changed=1
# Written by test/rig/up.sh. containerd 1.6 (config version 2), private to the rig.
version = 2
root = "$CD/root"
state = "$CD/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = "$SOCK.ttrpc"

[debug]
  address = "$RUN/containerd-debug.sock"
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = "$CD/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This sandbox lacks CAP_SYS_RESOURCE: without this, the pause container's oom_score_adj
  # of -998 makes every RunPodSandbox fail.
  restrict_oom_score_adj = true
  enable_selinux = false
  max_container_log_line_size = 16384
  # Sandbox network namespaces under the rig's state dir, not /var/run/netns.
  netns_mounts_under_state_dir = true

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

    # A second handler for RuntimeClass tests (see the containerd 2 config).
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-test]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc-test.options]
        BinaryName = "$RUNC_TEST"
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CNI_CONF_DIR"
    max_conf_num = 1

  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "$CD/certs.d"
EOF
fi
write_if_changed "$CNI_CONF_DIR/10-nodelet-rig.conflist" <<EOF || true
{
  "cniVersion": "1.0.0",
  "name": "nodelet-rig",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$RIG_DIR/cni/ipam"
      }
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
EOF
# containerd's CRI adds the loopback network itself; this file is for other CNI users.
write_if_changed "$CNI_CONF_DIR/99-loopback.conf" <<EOF || true
{"cniVersion": "1.0.0", "name": "lo", "type": "loopback"}
EOF

if ((cd_changed)) && alive containerd; then
	# Containers survive a containerd restart (their shims keep running).
	log "containerd config changed: restarting containerd"
	kill -TERM "$(cat "$RUN/containerd.pid")"
	for _ in $(seq 1 100); do alive containerd || break; sleep 0.1; done
fi
# containerd finds its shim (containerd-shim-runc-v2) on PATH: 2.x's own beside it.
start containerd env PATH="${CONTAINERD_BIN_DIR:+$CONTAINERD_BIN_DIR:}$PATH" "$CONTAINERD" --config "$CD/config.toml"
wait_until 30 "containerd $SOCK" "$CTR_BIN" -a "$SOCK" version
check_alive containerd

# ---------------------------------------------------------------- images and rig tools
cat >"$BIN/ctr" <<EOF
#!/bin/sh
# ctr against the rig's containerd, CRI namespace.
exec $CTR_BIN -a "$SOCK" -n k8s.io "\$@"
EOF
chmod +x "$BIN/ctr"
log "building pause, mkimage and rigcri"
(cd "$REPO" && CGO_ENABLED=0 go build -ldflags "-s -w" -o "$BIN/pause" ./test/rig/pause &&
	go build -o "$BIN/mkimage" ./test/rig/mkimage &&
	go build -o "$BIN/rigcri" ./test/rig/rigcri)
mkdir -p "$RIG_DIR/images"
"$BIN/mkimage" -kind busybox -bin /bin/busybox -name "$BUSYBOX_IMAGE" -o "$RIG_DIR/images/busybox.tar"
"$BIN/mkimage" -kind pause -bin "$BIN/pause" -name "$PAUSE_IMAGE" -o "$RIG_DIR/images/pause.tar"
for img in busybox pause; do
	"$BIN/ctr" images import "$RIG_DIR/images/$img.tar" >&2
done
# The list is read whole first: `ctr ... | grep -q` under pipefail fails when grep's early exit
# makes ctr die of SIGPIPE.
images=$("$BIN/ctr" images ls -q)
for img in "$BUSYBOX_IMAGE" "$PAUSE_IMAGE"; do
	grep -qxF "$img" <<<"$images" || die "image $img not in containerd after import"
done

# ---------------------------------------------------------------- local registry
# A registry (Debian's docker-registry 2.8) on 127.0.0.1, plain HTTP with htpasswd auth, holding
# the busybox image, so image pulls (pull secrets, ErrImagePull, back-off) are tested for real.
# The password is generated once and kept; containerd reaches the registry over HTTP through a
# hosts.toml in its config_path (read at each pull, no restart).
REGISTRY_PORT=${REGISTRY_PORT:-5000}
REGISTRY=127.0.0.1:$REGISTRY_PORT
REGISTRY_USER=nodelet
REGISTRY_IMAGE=$REGISTRY/busybox:e2e
REG=$RIG_DIR/registry
mkdir -p "$REG/data"
[[ -s "$REG/password" ]] || (umask 077 && openssl rand -hex 16 >"$REG/password")
REGISTRY_PASSWORD=$(cat "$REG/password")
# htpasswd -B salts each run: only rewrite when the entry no longer verifies.
if ! htpasswd -vb "$REG/htpasswd" "$REGISTRY_USER" "$REGISTRY_PASSWORD" >/dev/null 2>&1; then
	htpasswd -Bbn "$REGISTRY_USER" "$REGISTRY_PASSWORD" >"$REG/htpasswd.tmp" && mv "$REG/htpasswd.tmp" "$REG/htpasswd"
fi
reg_changed=0
write_if_changed "$REG/config.yml" <<REGEOF && reg_changed=1
# Written by test/rig/up.sh.
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $REG/data
  delete:
    enabled: true
http:
  addr: $REGISTRY
auth:
  htpasswd:
    realm: nodelet-rig
    path: $REG/htpasswd
REGEOF
if ((reg_changed)) && alive registry; then
	log "registry config changed: restarting the registry"
	kill -TERM "$(cat "$RUN/registry.pid")"
	for _ in $(seq 1 100); do alive registry || break; sleep 0.1; done
fi
start registry docker-registry serve "$REG/config.yml"
wait_until 30 "registry $REGISTRY" curl -fsS -o /dev/null -u "$REGISTRY_USER:$REGISTRY_PASSWORD" "http://$REGISTRY/v2/"
check_alive registry
mkdir -p "$CD/certs.d/$REGISTRY"
write_if_changed "$CD/certs.d/$REGISTRY/hosts.toml" <<REGEOF || true
server = "http://$REGISTRY"
[host."http://$REGISTRY"]
  capabilities = ["pull", "resolve"]
REGEOF
skopeo copy --quiet --dest-tls-verify=false --dest-creds "$REGISTRY_USER:$REGISTRY_PASSWORD" \
	"oci-archive:$RIG_DIR/images/busybox.tar" "docker://$REGISTRY_IMAGE" >&2 ||
	die "pushing busybox to $REGISTRY_IMAGE failed"

CONTAINER_RUNTIME_ENDPOINT=unix://$SOCK
wait_until 30 "CRI on $CONTAINER_RUNTIME_ENDPOINT" "$BIN/rigcri" -endpoint "$CONTAINER_RUNTIME_ENDPOINT" version

mkdir -p "$RIG_DIR/nodelet"
cat >"$RIG_DIR/rig.env.tmp" <<EOF
# Written by test/rig/up.sh at $(date -u +%FT%TZ). Read by test/e2e/framework.
RIG_DIR=$RIG_DIR
RIG_BIN_DIR=$RIG_BIN_DIR
NODE_NAME=$NODE_NAME
KUBECONFIG=$RIG_DIR/admin.kubeconfig
NODE_KUBECONFIG=$RIG_DIR/node.kubeconfig
BOOTSTRAP_KUBECONFIG=$RIG_DIR/bootstrap-kubelet.conf
BOOTSTRAP_TOKEN=$BOOTSTRAP_TOKEN
RIG_SIGNING_DURATION=$RIG_SIGNING_DURATION
APISERVER_URL=$APISERVER_URL
CA_CERT=$PKI/ca.crt
CA_KEY=$PKI/ca.key
ETCD_URL=$ETCD_URL
KUBELET_CLIENT_CERT=$PKI/apiserver-kubelet-client.crt
KUBELET_CLIENT_KEY=$PKI/apiserver-kubelet-client.key
KUBELET_SERVING_CERT=$PKI/kubelet-serving.crt
KUBELET_SERVING_KEY=$PKI/kubelet-serving.key
METRICS_SERVER_KUBECONFIG=$RIG_DIR/metrics-server.kubeconfig
METRICS_SERVER_CERT=$PKI/metrics-server.crt
METRICS_SERVER_KEY=$PKI/metrics-server.key
NODE_IP=$NODE_IP
CONTAINER_RUNTIME_ENDPOINT=$CONTAINER_RUNTIME_ENDPOINT
RIG_RUNTIME=$RIG_RUNTIME
CONTAINERD_VERSION=$CONTAINERD_VERSION
CONTAINERD_BIN_DIR=$CONTAINERD_BIN_DIR
CONTAINERD_ROOT=$CD/root
CONTAINERD_STATE=$CD/state
CNI_CONF_DIR=$CNI_CONF_DIR
POD_CIDR=$POD_CIDR
CNI_BRIDGE=$CNI_BRIDGE
NODELET_PORT=$NODELET_PORT
NODELET_HEALTHZ_PORT=$NODELET_HEALTHZ_PORT
CGROUP_ROOT=$CGROUP_ROOT
SCHEDULER_PORT=$SCHEDULER_PORT
SERVICE_CIDR=$SERVICE_CIDR
BUSYBOX_IMAGE=$BUSYBOX_IMAGE
PAUSE_IMAGE=$PAUSE_IMAGE
REGISTRY=$REGISTRY
REGISTRY_USER=$REGISTRY_USER
REGISTRY_PASSWORD=$REGISTRY_PASSWORD
REGISTRY_IMAGE=$REGISTRY_IMAGE
KUBECTL=$KUBECTL
CTR=$BIN/ctr
RIGCRI=$BIN/rigcri
NODELET_ROOT_BASE=$RIG_DIR/nodelet
LOGS_DIR=$LOGS
CDI_SPEC_DIR=$([[ $RIG_RUNTIME == containerd2 ]] && echo "$RIG_DIR/cdi")
EOF
mv "$RIG_DIR/rig.env.tmp" "$RIG_DIR/rig.env"
log "rig is up; env in $RIG_DIR/rig.env"
