package podutil

import v1 "k8s.io/api/core/v1"

// The one decision of whether a container comes back, with ContainerRestartRules
// (KEP-5307, beta and on by default since v1.35, as in the upstream kubelet
// v1.37): a container may carry its own restartPolicy, overriding the pod's,
// and restartPolicyRules matched on its exit code. podruntime asks it to
// restart or leave an exited container, podstatus to compute the pod's phase,
// prober whether a terminated container's probe worker has more to do.

// ContainerShouldRestart says whether container c of a pod with spec, exited
// with exitCode, is restarted. In order: the container's restartPolicyRules
// (the first that matches decides; only with a container-level restartPolicy,
// which the API requires for rules), the container's restartPolicy, then the
// pod's (Always when unset, as the API defaults it).
func ContainerShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		if rule, ok := matchingRestartRule(c, exitCode); ok && rule.Action == v1.ContainerRestartRuleActionRestart {
			return true
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

// matchingRestartRule is the first of c's rules whose exit codes match.
func matchingRestartRule(c *v1.Container, exitCode int32) (v1.ContainerRestartRule, bool) {
	for _, rule := range c.RestartPolicyRules {
		if rule.ExitCodes == nil {
			continue
		}
		in := false
		for _, v := range rule.ExitCodes.Values {
			if v == exitCode {
				in = true
				break
			}
		}
		switch rule.ExitCodes.Operator {
		case v1.ContainerRestartRuleOnExitCodesOpIn:
			if in {
				return rule, true
			}
		case v1.ContainerRestartRuleOnExitCodesOpNotIn:
			if !in {
				return rule, true
			}
		}
	}
	return v1.ContainerRestartRule{}, false
}

// IsContainerRestartable says whether c may ever be restarted, whatever its
// exit code: a rule that restarts, a container-level policy other than Never,
// or else the pod's policy other than Never. A pod none of whose containers is
// restartable runs once: its sandbox is never recreated once containers ran.
func IsContainerRestartable(spec *v1.PodSpec, c *v1.Container) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.Action == v1.ContainerRestartRuleActionRestart {
				return true
			}
		}
		return *c.RestartPolicy != v1.ContainerRestartPolicyNever
	}
	return spec.RestartPolicy != v1.RestartPolicyNever
}

// RestartsAfterKill says whether a container nodelet kills while it runs (a
// failed liveness or startup probe, an unknown state) is started again. No
// exit code is known yet, so rules are not asked, as upstream: the
// container's restartPolicy when set, else the pod's.
func RestartsAfterKill(spec *v1.PodSpec, c *v1.Container) bool {
	if c.RestartPolicy != nil {
		return *c.RestartPolicy != v1.ContainerRestartPolicyNever
	}
	return spec.RestartPolicy != v1.RestartPolicyNever
}
