// Package framework is the e2e test framework for nodelet: it reads the rig's environment
// (test/rig/up.sh writes rig.env), gives tests an admin client and a CRI client, starts the
// nodelet binary under test with a generated KubeletConfiguration, and has the polling helpers
// that keep scenarios short:
//
//	f := framework.New(t)
//	ns := f.NewNamespace()
//	f.StartNodelet(framework.NodeletOptions{})
//	pod := f.CreatePod(ctx, f.BusyboxPod(ns, "sleeper", "sleep", "3600"))
//	f.WaitForPodReady(ctx, ns, pod.Name, time.Minute)
package framework

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DefaultRigEnvPath is where test/rig/up.sh writes rig.env; NODELET_RIG_ENV overrides it.
const DefaultRigEnvPath = "/var/lib/nodelet-rig/rig.env"

// RigEnv is the content of rig.env: where the rig's pieces are.
type RigEnv struct {
	RigDir                   string // RIG_DIR
	NodeName                 string // NODE_NAME: the node name the node credential is for
	Kubeconfig               string // KUBECONFIG: admin (system:masters)
	NodeKubeconfig           string // NODE_KUBECONFIG: system:node:<NODE_NAME>
	APIServerURL             string // APISERVER_URL
	CACert                   string // CA_CERT: the rig's CA (apiserver serving and client certs)
	KubeletServingCert       string // KUBELET_SERVING_CERT: CA-signed serving cert for the node agent
	KubeletServingKey        string // KUBELET_SERVING_KEY
	ContainerRuntimeEndpoint string // CONTAINER_RUNTIME_ENDPOINT: unix://...
	BusyboxImage             string // BUSYBOX_IMAGE
	PauseImage               string // PAUSE_IMAGE: containerd's sandbox image
	Kubectl                  string // KUBECTL
	Ctr                      string // CTR: a ctr wrapper bound to the rig's containerd, namespace k8s.io
	NodeletRootBase          string // NODELET_ROOT_BASE: parent of per-test root dirs (down.sh cleans it)
	PodCIDR                  string // POD_CIDR: the CNI bridge's range
	NodeletPort              int32  // NODELET_PORT: the node agent's HTTPS port (10250)
	NodeletHealthzPort       int32  // NODELET_HEALTHZ_PORT: its healthz port (10248)
	// CgroupRoot is CGROUP_ROOT: the node agent's cgroupRoot ("" = "/"). A second rig on the
	// machine sets its own, so that its node agents never see the other rig's pod cgroups.
	CgroupRoot string

	// All holds every KEY=value of the file, including keys without a field above.
	All map[string]string
}

// LoadRigEnv reads the rig.env named by NODELET_RIG_ENV, or DefaultRigEnvPath.
func LoadRigEnv() (*RigEnv, error) {
	path := os.Getenv("NODELET_RIG_ENV")
	if path == "" {
		path = DefaultRigEnvPath
	}
	return ParseRigEnvFile(path)
}

// ParseRigEnvFile reads a rig.env file: KEY=value lines, '#' comments, optional quotes.
func ParseRigEnvFile(path string) (*RigEnv, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading rig env (is the rig up? run test/rig/up.sh): %w", err)
	}
	defer f.Close()
	all := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("reading rig env %s: line %d is not KEY=value: %q", path, n, line)
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		all[strings.TrimPrefix(k, "export ")] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading rig env %s: %w", path, err)
	}
	e := &RigEnv{
		RigDir:                   all["RIG_DIR"],
		NodeName:                 all["NODE_NAME"],
		Kubeconfig:               all["KUBECONFIG"],
		NodeKubeconfig:           all["NODE_KUBECONFIG"],
		APIServerURL:             all["APISERVER_URL"],
		CACert:                   all["CA_CERT"],
		KubeletServingCert:       all["KUBELET_SERVING_CERT"],
		KubeletServingKey:        all["KUBELET_SERVING_KEY"],
		ContainerRuntimeEndpoint: all["CONTAINER_RUNTIME_ENDPOINT"],
		BusyboxImage:             all["BUSYBOX_IMAGE"],
		PauseImage:               all["PAUSE_IMAGE"],
		Kubectl:                  all["KUBECTL"],
		Ctr:                      all["CTR"],
		NodeletRootBase:          all["NODELET_ROOT_BASE"],
		PodCIDR:                  all["POD_CIDR"],
		CgroupRoot:               all["CGROUP_ROOT"],
		All:                      all,
	}
	var missing []string
	for k, v := range map[string]string{
		"RIG_DIR": e.RigDir, "NODE_NAME": e.NodeName, "KUBECONFIG": e.Kubeconfig,
		"NODE_KUBECONFIG": e.NodeKubeconfig, "CONTAINER_RUNTIME_ENDPOINT": e.ContainerRuntimeEndpoint,
		"BUSYBOX_IMAGE": e.BusyboxImage,
	} {
		if v == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("reading rig env %s: missing %s", path, strings.Join(missing, ", "))
	}
	for _, p := range []struct {
		key  string
		dst  *int32
		dflt int32
	}{{"NODELET_PORT", &e.NodeletPort, 10250}, {"NODELET_HEALTHZ_PORT", &e.NodeletHealthzPort, 10248}} {
		*p.dst = p.dflt
		if v := all[p.key]; v != "" {
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("reading rig env %s: %s: %w", path, p.key, err)
			}
			*p.dst = int32(n)
		}
	}
	if e.NodeletRootBase == "" {
		e.NodeletRootBase = e.RigDir + "/nodelet"
	}
	return e, nil
}
