package config

import (
	"fmt"

	logsapi "k8s.io/component-base/logs/api/v1"
	// The kubelet offers the json log format (beta, LoggingBetaOptions);
	// registering it makes logging.format: json valid.
	_ "k8s.io/component-base/logs/json/register"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// ApplyLogging applies kc.Logging (format text or json with their options,
// verbosity, vmodule, flushFrequency) to klog through
// k8s.io/component-base/logs, as the kubelet does once its configuration is
// loaded. It must run early, before other goroutines log: the library
// refuses a second, different application. streams overrides stdout and
// stderr (tests); nil means the process's own.
func ApplyLogging(kc *kubeletconfigv1beta1.KubeletConfiguration, streams *logsapi.LoggingOptions) error {
	gates, err := FeatureGates(kc)
	if err != nil {
		return err
	}
	if err := logsapi.ValidateAndApplyWithOptions(&kc.Logging, streams, gates.logging()); err != nil {
		return fmt.Errorf("applying the logging configuration: %w", err)
	}
	return nil
}
