package version

import (
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// The version must parse as the kubelet's does for every version-gated
// consumer (kubeadm's preflight, the API server's node checks) and compare
// equal to, not older than, the release nodelet implements.
func TestGetParsesAndIsAtLeastTheRelease(t *testing.T) {
	info := Get()
	if info.GitVersion != Default {
		t.Fatalf("GitVersion = %q, want the fallback %q in an unstamped test binary", info.GitVersion, Default)
	}
	release := utilversion.MustParseSemantic("v1.37.2")
	sem, err := utilversion.ParseSemantic(info.GitVersion)
	if err != nil {
		t.Fatalf("ParseSemantic(%q): %v", info.GitVersion, err)
	}
	if !sem.AtLeast(release) {
		t.Errorf("%q is older than %s", info.GitVersion, release)
	}
	if sem.Major() != 1 || sem.Minor() != 37 || sem.Patch() != 2 || sem.PreRelease() != "" || sem.BuildMetadata() != "nodelet" {
		t.Errorf("%q parsed as %v (pre-release %q, build %q)", info.GitVersion, sem, sem.PreRelease(), sem.BuildMetadata())
	}
	gen, err := utilversion.ParseGeneric(info.GitVersion)
	if err != nil {
		t.Fatalf("ParseGeneric(%q): %v", info.GitVersion, err)
	}
	if !gen.AtLeast(utilversion.MustParseGeneric("v1.37.2")) {
		t.Errorf("ParseGeneric(%q) = %v, older than v1.37.2", info.GitVersion, gen)
	}
	if info.Major != "1" || info.Minor != "37" {
		t.Errorf("Major, Minor = %q, %q; want 1, 37", info.Major, info.Minor)
	}
	if info.GitCommit == "$Format:%H$" {
		t.Errorf("GitCommit is component-base's placeholder")
	}
}
