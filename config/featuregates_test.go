package config

import (
	"errors"
	"strings"
	"testing"

	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func TestFeatureGates(t *testing.T) {
	tests := []struct {
		name    string
		gates   map[string]bool
		refused map[string]string // featureGates[Name] -> detail substring
		enabled map[string]bool   // checked on success
		warn    string
	}{
		{name: "none set: the v1.37 defaults", enabled: map[string]bool{
			"ContainerRestartRules": true, "InPlacePodVerticalScaling": true, "EventedPLEG": false, "LoggingBetaOptions": true,
		}},
		{name: "unknown gate", gates: map[string]bool{"Bogus": true},
			refused: map[string]string{"Bogus": "unrecognized feature gate: Bogus"}},
		{name: "removed gate is unknown, as in v1.37", gates: map[string]bool{"DisableKubeletCloudCredentialProviders": true},
			refused: map[string]string{"DisableKubeletCloudCredentialProviders": "unrecognized feature gate"}},
		{name: "locked gate against its lock", gates: map[string]bool{"NodeSwap": false},
			refused: map[string]string{"NodeSwap": "cannot set feature gate NodeSwap to false, feature is locked to true"}},
		{name: "locked gate at its lock", gates: map[string]bool{"NodeSwap": true, "DynamicResourceAllocation": true},
			enabled: map[string]bool{"NodeSwap": true}},
		// Tracing follows the tracing field alone: the gate is GA and locked on.
		{name: "KubeletTracing cannot be turned off", gates: map[string]bool{"KubeletTracing": false},
			refused: map[string]string{"KubeletTracing": "cannot set feature gate KubeletTracing to false, feature is locked to true"}},
		{name: "alpha feature nodelet lacks", gates: map[string]bool{"ContainerStopSignals": true},
			refused: map[string]string{"ContainerStopSignals": "nodelet does not build ContainerStopSignals (container stop signals"}},
		{name: "EventedPLEG is honoured", gates: map[string]bool{"EventedPLEG": true},
			enabled: map[string]bool{"EventedPLEG": true}},
		{name: "turning off a feature nodelet lacks is what it does", gates: map[string]bool{"MemoryQoS": false, "ContainerCheckpoint": false},
			enabled: map[string]bool{"MemoryQoS": false}},
		{name: "built feature cannot be turned off", gates: map[string]bool{"ContainerRestartRules": false},
			refused: map[string]string{"ContainerRestartRules": "nodelet always has ContainerRestartRules"}},
		{name: "the pod resources API lists active pods only", gates: map[string]bool{"KubeletPodResourcesListUseActivePods": false},
			refused: map[string]string{"KubeletPodResourcesListUseActivePods": "nodelet always has KubeletPodResourcesListUseActivePods"}},
		{name: "gates the kubelet does not read are accepted", gates: map[string]bool{"HPAScaleToZero": false, "CBORServingAndStorage": true},
			enabled: map[string]bool{"HPAScaleToZero": false, "CBORServingAndStorage": true}},
		{name: "logging gates are honoured", gates: map[string]bool{"LoggingAlphaOptions": true, "ContextualLogging": false},
			enabled: map[string]bool{"LoggingAlphaOptions": true, "ContextualLogging": false}},
		{name: "AllAlpha off is the default", gates: map[string]bool{"AllAlpha": false}},
		{name: "AllAlpha on", gates: map[string]bool{"AllAlpha": true}, refused: map[string]string{"AllAlpha": "every alpha feature"}},
		{name: "deprecated gate warns", gates: map[string]bool{"KMSv1": true}, warn: "Setting deprecated feature gate KMSv1=true"},
		{name: "every refusal reported", gates: map[string]bool{"Bogus": true, "ContainerStopSignals": true, "NodeSwap": false},
			refused: map[string]string{"Bogus": "unrecognized", "ContainerStopSignals": "does not build", "NodeSwap": "locked"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{FeatureGates: tc.gates}
			g, err := FeatureGates(kc)
			got := map[string]string{}
			var fe *FieldError
			for _, e := range unjoin(err) {
				if !errors.As(e, &fe) {
					t.Fatalf("%v is not a *FieldError", e)
				}
				got[fe.Field] = fe.Detail
			}
			if len(got) != len(tc.refused) {
				t.Errorf("refused %v, want %v", got, tc.refused)
			}
			for name, want := range tc.refused {
				if d, ok := got["featureGates["+name+"]"]; !ok || !strings.Contains(d, want) {
					t.Errorf("featureGates[%s]: got %q, want it refused with %q", name, d, want)
				}
			}
			for name, want := range tc.enabled {
				if g.Enabled(name) != want {
					t.Errorf("Enabled(%s) = %v, want %v", name, g.Enabled(name), want)
				}
			}
			if tc.warn != "" && !strings.Contains(strings.Join(g.Warnings, "\n"), tc.warn) {
				t.Errorf("warnings %q, want one containing %q", g.Warnings, tc.warn)
			}
		})
	}
}

// TestFeatureGatesReachLogging: the gates the logging library reads come
// from featureGates, so json's infoBufferSize (alpha) needs LoggingAlphaOptions.
func TestFeatureGatesReachLogging(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	SetDefaults(kc)
	kc.Logging.Format = "json"
	if err := kc.Logging.Options.JSON.InfoBufferSize.Set("1Mi"); err != nil {
		t.Fatal(err)
	}
	err := Validate(kc)
	if err == nil || !strings.Contains(err.Error(), "logging.options.json.infoBufferSize") {
		t.Fatalf("got %v, want infoBufferSize refused without LoggingAlphaOptions", err)
	}
	kc.FeatureGates = map[string]bool{string(logsapi.LoggingAlphaOptions): true}
	if err := Validate(kc); err != nil {
		t.Errorf("with LoggingAlphaOptions: %v", err)
	}
}

// TestLoadFeatureGatesRefused: Load refuses a bad gate from the file by name.
func TestLoadFeatureGatesRefused(t *testing.T) {
	p := writeFile(t, t.TempDir(), "config.yaml", header+"featureGates:\n  Bogus: true\n")
	_, err := Load([]string{"--config", p})
	if err == nil || !strings.Contains(err.Error(), "featureGates[Bogus]: unrecognized feature gate: Bogus") {
		t.Errorf("got %v", err)
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestGateDecisionsCoverTheKubelet: every gate the v1.37 kubelet reads and
// that may be changed (not locked) has nodelet's decision, and every decision
// names a real gate.
func TestGateDecisionsCoverTheKubelet(t *testing.T) {
	specs := map[string]GateSpec{}
	for _, s := range upstreamGateSpecs() {
		specs[s.Name] = s
	}
	decided := nodeletGates()
	var undecided []string
	for _, s := range upstreamGateSpecs() {
		if _, ok := decided[s.Name]; s.Kubelet && !s.Locked && !ok {
			undecided = append(undecided, s.Name)
		}
	}
	if len(undecided) > 0 {
		t.Errorf("gates the kubelet reads with no nodelet decision (they are refused off their default): %v", undecided)
	}
	for name := range decided {
		if _, ok := specs[name]; !ok {
			t.Errorf("nodeletGates decides %s, which is not a v1.37 gate", name)
		}
	}
}
