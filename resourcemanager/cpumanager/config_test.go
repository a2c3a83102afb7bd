package cpumanager

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	testclock "k8s.io/utils/clock/testing"
)

// TestNewFromConfig proves cpuManagerPolicy, cpuManagerPolicyOptions and
// cpuManagerReconcilePeriod take effect (config.FieldRules names it).
func TestNewFromConfig(t *testing.T) {
	tests := []struct {
		name    string
		root    func(*testing.T) string
		kc      kubeletconfigv1beta1.KubeletConfiguration
		wantErr string
		check   func(t *testing.T, m *Manager)
	}{
		{name: "none pins nothing", root: fixtureOneSocketTwoCores, kc: kubeletconfigv1beta1.KubeletConfiguration{CPUManagerPolicy: "none"},
			check: func(t *testing.T, m *Manager) {
				if got := m.CPUSetFor("g", "app"); got != "" {
					t.Errorf("cpuset %q under none", got)
				}
				if err := admitPod(m, guaranteed("g", "app", "1")); err != nil {
					t.Error("none refused a pod")
				}
			}},
		{name: "static with reservedSystemCPUs", root: fixtureOneSocketTwoCores, kc: kubeletconfigv1beta1.KubeletConfiguration{
			CPUManagerPolicy: "static", ReservedSystemCPUs: "0", CPUManagerReconcilePeriod: metav1.Duration{Duration: 5 * time.Second},
		}, check: func(t *testing.T, m *Manager) {
			if m.cfg.ReconcilePeriod != 5*time.Second {
				t.Errorf("reconcile period %v", m.cfg.ReconcilePeriod)
			}
			if err := admitPod(m, guaranteed("g", "app", "1")); err != nil || m.CPUSetFor("g", "app") != "1" || m.CPUSetFor("be", "app") != "0" {
				t.Errorf("Guaranteed %q, shared %q; want 1 and 0", m.CPUSetFor("g", "app"), m.CPUSetFor("be", "app"))
			}
		}},
		{name: "static reserving kubeReserved+systemReserved rounded up", root: fixtureTwoNUMASMT, kc: kubeletconfigv1beta1.KubeletConfiguration{
			CPUManagerPolicy: "static", KubeReserved: map[string]string{"cpu": "500m"}, SystemReserved: map[string]string{"cpu": "600m"},
		}, check: func(t *testing.T, m *Manager) {
			if got := m.cfg.Static.Reserved.String(); got != "0,8" {
				t.Errorf("reserved %q, want 0,8", got)
			}
		}},
		{name: "static with full-pcpus-only", root: fixtureTwoNUMASMT, kc: kubeletconfigv1beta1.KubeletConfiguration{
			CPUManagerPolicy: "static", ReservedSystemCPUs: "0,8", CPUManagerPolicyOptions: map[string]string{"full-pcpus-only": "true"},
		}, check: func(t *testing.T, m *Manager) {
			var smt SMTAlignmentError
			if err := admitPod(m, guaranteed("g", "app", "1")); !errors.As(err, &smt) {
				t.Errorf("got %v, want an SMTAlignmentError", err)
			}
		}},
		{name: "static without a reservation", root: fixtureOneSocketTwoCores, kc: kubeletconfigv1beta1.KubeletConfiguration{CPUManagerPolicy: "static"},
			wantErr: "greater than zero"},
		{name: "unknown option", root: fixtureOneSocketTwoCores, kc: kubeletconfigv1beta1.KubeletConfiguration{
			CPUManagerPolicy: "static", ReservedSystemCPUs: "0", CPUManagerPolicyOptions: map[string]string{"bogus": "true"},
		}, wantErr: `unsupported cpu manager policy option "bogus"`},
		{name: "bogus policy", root: fixtureOneSocketTwoCores, kc: kubeletconfigv1beta1.KubeletConfiguration{CPUManagerPolicy: "bogus"},
			wantErr: `unknown policy "bogus"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := NewFromConfig(&tc.kc, t.TempDir(), tc.root(t), &fakeRuntime{},
				func(context.Context) ([]RunningContainer, error) { return nil, nil }, func() []*v1.Pod { return nil },
				testclock.NewFakeClock(time.Now()), nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, m)
		})
	}
}
