package agent

import (
	"fmt"

	"github.com/blang/semver/v4"
	metricsv1 "k8s.io/component-base/metrics/api/v1"
)

// showHiddenMetrics decides showHiddenMetricsForVersion as upstream: "" hides the
// metrics deprecated before the previous minor version; the previous minor version
// (of the version nodelet implements, Version) shows them again; anything else is
// refused, naming the field. Upstream's check (component-base) is used, with
// nodelet's version: component-base's own build version is not set in nodelet.
func showHiddenMetrics(target string) (bool, error) {
	current, err := semver.ParseTolerant(Version)
	if err != nil {
		return false, fmt.Errorf("parsing nodelet's version %q: %w", Version, err)
	}
	if err := metricsv1.ValidateShowHiddenMetricsVersionForKubeletBackwardCompatOnly(current, target); err != nil {
		return false, err
	}
	return target != "", nil
}
