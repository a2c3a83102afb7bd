// Package version is nodelet's version record. hack/build.sh stamps it into
// k8s.io/component-base/version with -ldflags -X, as the kubelet's build does;
// a plain `go build` or `go test` leaves component-base's placeholder
// (v0.0.0-master+$Format:%H$), which no version-gated consumer can use, so
// Get then reports Default instead.
package version

import (
	"runtime/debug"
	"strings"

	apimachineryversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/component-base/version"
)

// Default is the version of an unstamped build and the one hack/build.sh
// stamps (it reads this line): the Kubernetes release whose kubelet nodelet
// implements, with "+nodelet" as semver build metadata, so it compares equal
// to that release (a "-nodelet" pre-release would compare older).
const Default = "v1.37.2+nodelet"

// unstampedPrefix starts component-base's gitVersion when no -X set it.
const unstampedPrefix = "v0.0.0-"

// Get is the version record nodelet reports: --version, the Node's
// nodeInfo.kubeletVersion and kubernetes_build_info.
func Get() apimachineryversion.Info {
	info := version.Get()
	// An unexpanded git-archive placeholder is no commit.
	if strings.HasPrefix(info.GitCommit, "$Format") {
		info.GitCommit = ""
	}
	if !strings.HasPrefix(info.GitVersion, unstampedPrefix) {
		return info
	}
	info.GitVersion = Default
	info.Major, info.Minor = majorMinor(Default)
	// The Go toolchain records the commit in binaries built from a git
	// checkout; tests have none.
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.GitCommit = s.Value
			case "vcs.modified":
				info.GitTreeState = map[string]string{"true": "dirty", "false": "clean"}[s.Value]
			case "vcs.time":
				// The commit's time: the closest to a build date that a
				// plain go build records.
				info.BuildDate = s.Value
			}
		}
	}
	return info
}

// majorMinor splits "vMAJOR.MINOR.PATCH..." as the build stamps gitMajor and
// gitMinor.
func majorMinor(v string) (string, string) {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	if len(parts) < 2 {
		return "", ""
	}
	return parts[0], parts[1]
}
