package config

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
)

// TestLoadRealConfigs loads the configurations that kubeadm, k3s and the
// managed-node bootstrap scripts write (testdata/configs/README.md) and
// checks the values the upstream kubelet ends up with, in particular for the
// explicit zeros kubeadm and k3s write: in --config they are unset and
// defaulted; in a --config-dir drop-in they are kept (upstream merges
// drop-ins over the defaulted configuration and does not default again).
func TestLoadRealConfigs(t *testing.T) {
	dir := filepath.Join("testdata", "configs")
	tests := []struct {
		name string
		args []string
		// want maps JSON paths to the JSON of the resulting value.
		want map[string]string
		// refused lists the fields Load must name (and nothing else).
		refused []string
		// warns lists fields that upstream's lenient decoding warns about.
		warns []string
	}{
		{
			name: "kubeadm /var/lib/kubelet/config.yaml with kubeadm-flags.env",
			args: []string{"--config", filepath.Join(dir, "kubeadm-config.yaml"),
				"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock"},
			want: map[string]string{
				"syncFrequency":                              `"1m0s"`,
				"fileCheckFrequency":                         `"20s"`,
				"httpCheckFrequency":                         `"20s"`,
				"authentication.webhook.cacheTTL":            `"2m0s"`,
				"authorization.webhook.cacheAuthorizedTTL":   `"5m0s"`,
				"authorization.webhook.cacheUnauthorizedTTL": `"30s"`,
				"cpuManagerReconcilePeriod":                  `"10s"`,
				"evictionPressureTransitionPeriod":           `"5m0s"`,
				"imageMinimumGCAge":                          `"2m0s"`,
				"imageMaximumGCAge":                          `"0s"`,
				"nodeStatusUpdateFrequency":                  `"10s"`,
				"nodeStatusReportFrequency":                  `"5m0s"`,
				"runtimeRequestTimeout":                      `"2m0s"`,
				"shutdownGracePeriod":                        `"0s"`,
				"shutdownGracePeriodCriticalPods":            `"0s"`,
				"streamingConnectionIdleTimeout":             `"4h0m0s"`,
				"volumeStatsAggPeriod":                       `"1m0s"`,
				"logging.flushFrequency":                     `"5s"`,
				"logging.format":                             `"text"`,
				"logging.verbosity":                          `0`,
				"containerRuntimeEndpoint":                   `"unix:///var/run/containerd/containerd.sock"`,
				"readOnlyPort":                               `0`,
				"cgroupDriver":                               `"systemd"`,
				"authentication.x509.clientCAFile":           `"/etc/kubernetes/pki/ca.crt"`,
				"evictionHard":                               `{"imagefs.available":"15%","imagefs.inodesFree":"5%","memory.available":"100Mi","nodefs.available":"10%","nodefs.inodesFree":"5%"}`,
			},
		},
		{
			name: "kubeadm's config.yaml as a drop-in: its explicit zeros are kept and refused by name",
			args: []string{"--config", filepath.Join(dir, "aks-kubeletconfig.json"), "--config-dir", filepath.Join(dir, "kubeadm-as-drop-in")},
			// containerRuntimeEndpoint: "" clears it too, as upstream.
			refused: []string{"syncFrequency", "nodeStatusUpdateFrequency", "nodeStatusReportFrequency", "runtimeRequestTimeout", "logging.flushFrequency", "containerRuntimeEndpoint"},
		},
		{
			name: "k3s: drop-in over the flags-only defaults",
			args: []string{"--config-dir", filepath.Join(dir, "k3s", "kubelet.conf.d"),
				"--container-runtime-endpoint=unix:///run/k3s/containerd/containerd.sock"},
			want: map[string]string{
				// k3s' explicit zeros are kept, as upstream, and are the defaults anyway.
				"shutdownGracePeriod":              `"0s"`,
				"shutdownGracePeriodCriticalPods":  `"0s"`,
				"imageMaximumGCAge":                `"0s"`,
				"syncFrequency":                    `"1m0s"`,
				"authorization.mode":               `"Webhook"`,
				"authentication.anonymous.enabled": `false`,
				// readOnlyPort: 0 is omitted when k3s marshals its defaults, so
				// the flags-only legacy default stays (upstream #131355).
				"readOnlyPort": `10255`,
				"failSwapOn":   `false`,
				// Taken whole, not merged into the defaults: upstream's
				// flags-only configuration has no evictionHard to merge into.
				"evictionHard":             `{"imagefs.available":"5%","nodefs.available":"5%"}`,
				"containerRuntimeEndpoint": `"unix:///run/k3s/containerd/containerd.sock"`,
				"logging.flushFrequency":   `"5s"`,
			},
		},
		{
			name: "EKS AL2023 nodeadm config.json with its drop-in",
			args: []string{"--config", filepath.Join(dir, "eks-al2023", "config.json"), "--config-dir", filepath.Join(dir, "eks-al2023", "config.json.d")},
			want: map[string]string{
				"maxPods":                  `58`,
				"shutdownGracePeriod":      `"30s"`,
				"logging.verbosity":        `2`,
				"providerID":               `"aws:///us-west-2a/i-0123456789abcdef0"`,
				"hairpinMode":              `"hairpin-veth"`,
				"featureGates":             `{"DynamicResourceAllocation":true,"RotateKubeletServerCertificate":true}`,
				"syncFrequency":            `"1m0s"`,
				"containerRuntimeEndpoint": `"unix:///run/containerd/containerd.sock"`,
			},
		},
		{
			name:    "EKS AL2 template: NodeSwap is locked to true in v1.37",
			args:    []string{"--config", filepath.Join(dir, "eks-al2-kubelet-config.json")},
			refused: []string{"featureGates[NodeSwap]"},
		},
		{
			name:    "GKE: kernelMemcgNotification is not built",
			args:    []string{"--config", filepath.Join(dir, "gke-kubelet-config.yaml")},
			refused: []string{"kernelMemcgNotification"},
		},
		{
			name: "AKS default pool",
			args: []string{"--config", filepath.Join(dir, "aks-kubeletconfig.json")},
			want: map[string]string{
				"readOnlyPort":                     `10255`,
				"eventRecordQPS":                   `0`,
				"authentication.anonymous.enabled": `false`,
				"authentication.webhook.cacheTTL":  `"2m0s"`,
				"nodeStatusReportFrequency":        `"5m0s"`,
				"syncFrequency":                    `"1m0s"`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Load(tc.args)
			if len(tc.refused) > 0 {
				var got []string
				for _, e := range unjoinAll(err) {
					var fe *FieldError
					if errors.As(e, &fe) {
						got = append(got, fe.Field)
					} else {
						t.Errorf("refusal %v names no field", e)
					}
				}
				if !sameSet(got, tc.refused) {
					t.Errorf("refused %v, want %v (error: %v)", got, tc.refused, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(o.DecodeWarnings) > 0 {
				t.Errorf("unexpected decode warnings: %v", o.DecodeWarnings)
			}
			for path, want := range tc.want {
				v, ok := fieldByPath(reflect.ValueOf(o.Config).Elem(), path)
				if !ok {
					t.Errorf("%s: no such field", path)
					continue
				}
				got, err := json.Marshal(v.Interface())
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != want {
					t.Errorf("%s = %s, want %s", path, got, want)
				}
			}
		})
	}
}

// unjoinAll flattens errors.Join trees (Load wraps the joined validation
// errors once more).
func unjoinAll(err error) []error {
	if err == nil {
		return nil
	}
	switch e := err.(type) {
	case interface{ Unwrap() []error }:
		var out []error
		for _, c := range e.Unwrap() {
			out = append(out, unjoinAll(c)...)
		}
		return out
	case interface{ Unwrap() error }:
		if _, ok := err.(*FieldError); !ok {
			return unjoinAll(e.Unwrap())
		}
	}
	return []error{err}
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	seen := map[string]int{}
	for _, s := range a {
		seen[s]++
	}
	for _, s := range b {
		seen[s]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}
