package agent

import "testing"

// --cloud-provider: "external" or none; upstream has no in-tree providers.
func TestExternalCloudProviderFlag(t *testing.T) {
	for name, want := range map[string]bool{"": false, "external": true} {
		if got, err := externalCloudProvider(name); err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", name, got, err, want)
		}
	}
	if _, err := externalCloudProvider("aws"); err == nil {
		t.Error("--cloud-provider=aws accepted")
	}
}
