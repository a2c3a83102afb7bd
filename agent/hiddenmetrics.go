package agent

import (
	"fmt"

	"github.com/blang/semver/v4"
	metricsv1 "k8s.io/component-base/metrics/api/v1"

	nodeletversion "github.com/nodelet/nodelet/internal/version"
)

// showHiddenMetrics decides showHiddenMetricsForVersion as upstream: "" hides the
// metrics deprecated before the previous minor version; the previous minor version
// (of the version nodelet reports) shows them again; anything else is
// refused, naming the field. Upstream's check (component-base) is used, with
// nodelet's version (internal/version: component-base's, or its fallback when
// the build did not stamp it).
func showHiddenMetrics(target string) (bool, error) {
	v := nodeletversion.Get().GitVersion
	current, err := semver.ParseTolerant(v)
	if err != nil {
		return false, fmt.Errorf("parsing nodelet's version %q: %w", v, err)
	}
	if err := metricsv1.ValidateShowHiddenMetricsVersionForKubeletBackwardCompatOnly(current, target); err != nil {
		return false, err
	}
	return target != "", nil
}
