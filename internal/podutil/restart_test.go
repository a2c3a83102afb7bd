package podutil

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func rules(op v1.ContainerRestartRuleOnExitCodesOperator, values ...int32) []v1.ContainerRestartRule {
	return []v1.ContainerRestartRule{{Action: v1.ContainerRestartRuleActionRestart,
		ExitCodes: &v1.ContainerRestartRuleOnExitCodes{Operator: op, Values: values}}}
}

func TestContainerShouldRestart(t *testing.T) {
	never, always, onFailure := ptr.To(v1.ContainerRestartPolicyNever), ptr.To(v1.ContainerRestartPolicyAlways), ptr.To(v1.ContainerRestartPolicyOnFailure)
	tests := []struct {
		name      string
		pod       v1.RestartPolicy
		policy    *v1.ContainerRestartPolicy
		rules     []v1.ContainerRestartRule
		exit      int32
		want      bool
		restartab bool // IsContainerRestartable
	}{
		// Pod-level policy alone, as before KEP-5307.
		{name: "pod Always, success", pod: v1.RestartPolicyAlways, exit: 0, want: true, restartab: true},
		{name: "pod Always, failure", pod: v1.RestartPolicyAlways, exit: 1, want: true, restartab: true},
		{name: "pod OnFailure, success", pod: v1.RestartPolicyOnFailure, exit: 0, want: false, restartab: true},
		{name: "pod OnFailure, failure", pod: v1.RestartPolicyOnFailure, exit: 2, want: true, restartab: true},
		{name: "pod Never, failure", pod: v1.RestartPolicyNever, exit: 1, want: false, restartab: false},
		{name: "pod policy unset defaults to Always", pod: "", exit: 1, want: true, restartab: true},
		// Container-level policy overrides the pod's.
		{name: "container Never in an Always pod", pod: v1.RestartPolicyAlways, policy: never, exit: 1, want: false, restartab: false},
		{name: "container Always in a Never pod", pod: v1.RestartPolicyNever, policy: always, exit: 1, want: true, restartab: true},
		{name: "container Always in a Never pod, success", pod: v1.RestartPolicyNever, policy: always, exit: 0, want: true, restartab: true},
		{name: "container OnFailure in a Never pod, failure", pod: v1.RestartPolicyNever, policy: onFailure, exit: 3, want: true, restartab: true},
		{name: "container OnFailure in an Always pod, success", pod: v1.RestartPolicyAlways, policy: onFailure, exit: 0, want: false, restartab: true},
		// Rules come first.
		{name: "rule In matches", pod: v1.RestartPolicyNever, policy: never, rules: rules(v1.ContainerRestartRuleOnExitCodesOpIn, 42), exit: 42, want: true, restartab: true},
		{name: "rule In does not match: container Never", pod: v1.RestartPolicyNever, policy: never, rules: rules(v1.ContainerRestartRuleOnExitCodesOpIn, 42), exit: 1, want: false, restartab: true},
		{name: "rule In does not match: container Always", pod: v1.RestartPolicyNever, policy: always, rules: rules(v1.ContainerRestartRuleOnExitCodesOpIn, 42), exit: 1, want: true, restartab: true},
		{name: "rule NotIn matches", pod: v1.RestartPolicyNever, policy: never, rules: rules(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1), exit: 7, want: true, restartab: true},
		{name: "rule NotIn does not match", pod: v1.RestartPolicyAlways, policy: never, rules: rules(v1.ContainerRestartRuleOnExitCodesOpNotIn, 0, 1), exit: 1, want: false, restartab: true},
		{name: "rule In with several values", pod: v1.RestartPolicyNever, policy: never, rules: rules(v1.ContainerRestartRuleOnExitCodesOpIn, 3, 42, 137), exit: 137, want: true, restartab: true},
		{name: "rule of an unknown operator is skipped", pod: v1.RestartPolicyNever, policy: never, rules: rules("Between", 42), exit: 42, want: false, restartab: true},
		{name: "rules without a container policy are not asked", pod: v1.RestartPolicyNever, rules: rules(v1.ContainerRestartRuleOnExitCodesOpIn, 42), exit: 42, want: false, restartab: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := &v1.PodSpec{RestartPolicy: tt.pod}
			c := &v1.Container{Name: "c", RestartPolicy: tt.policy, RestartPolicyRules: tt.rules}
			if got := ContainerShouldRestart(c, spec, tt.exit); got != tt.want {
				t.Errorf("ContainerShouldRestart = %v, want %v", got, tt.want)
			}
			if got := IsContainerRestartable(spec, c); got != tt.restartab {
				t.Errorf("IsContainerRestartable = %v, want %v", got, tt.restartab)
			}
		})
	}
}

func TestRestartsAfterKill(t *testing.T) {
	tests := []struct {
		name   string
		pod    v1.RestartPolicy
		policy *v1.ContainerRestartPolicy
		rules  []v1.ContainerRestartRule
		want   bool
	}{
		{name: "pod Always", pod: v1.RestartPolicyAlways, want: true},
		{name: "pod OnFailure", pod: v1.RestartPolicyOnFailure, want: true},
		{name: "pod Never", pod: v1.RestartPolicyNever, want: false},
		{name: "container Never in an Always pod", pod: v1.RestartPolicyAlways, policy: ptr.To(v1.ContainerRestartPolicyNever), want: false},
		{name: "container Always in a Never pod", pod: v1.RestartPolicyNever, policy: ptr.To(v1.ContainerRestartPolicyAlways), want: true},
		{name: "rules are not asked: no exit code yet", pod: v1.RestartPolicyNever, policy: ptr.To(v1.ContainerRestartPolicyNever),
			rules: rules(v1.ContainerRestartRuleOnExitCodesOpNotIn), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &v1.Container{RestartPolicy: tt.policy, RestartPolicyRules: tt.rules}
			if got := RestartsAfterKill(&v1.PodSpec{RestartPolicy: tt.pod}, c); got != tt.want {
				t.Errorf("RestartsAfterKill = %v, want %v", got, tt.want)
			}
		})
	}
}
