package nodeshutdown

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

func TestGroups(t *testing.T) {
	d := func(s string) metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return metav1.Duration{Duration: v}
	}
	type byPrio = kubeletconfigv1beta1.ShutdownGracePeriodByPodPriority
	tests := []struct {
		name    string
		kc      *kubeletconfigv1beta1.KubeletConfiguration
		want    []Group
		wantErr string
	}{
		{name: "nil config: off", kc: nil},
		{name: "empty: off", kc: &kubeletconfigv1beta1.KubeletConfiguration{}},
		{
			name: "two values",
			kc:   &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("30s"), ShutdownGracePeriodCriticalPods: d("10s")},
			want: []Group{{Priority: 0, GracePeriod: 20 * time.Second}, {Priority: 2000000000, GracePeriod: 10 * time.Second}},
		},
		{
			name: "total only: critical group gets nothing",
			kc:   &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("30s")},
			want: []Group{{Priority: 0, GracePeriod: 30 * time.Second}, {Priority: 2000000000, GracePeriod: 0}},
		},
		{
			name: "critical equals total",
			kc:   &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("10s"), ShutdownGracePeriodCriticalPods: d("10s")},
			want: []Group{{Priority: 0, GracePeriod: 0}, {Priority: 2000000000, GracePeriod: 10 * time.Second}},
		},
		{
			name:    "critical above total",
			kc:      &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("10s"), ShutdownGracePeriodCriticalPods: d("11s")},
			wantErr: "must not be greater than shutdownGracePeriod",
		},
		{
			name:    "critical without total",
			kc:      &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriodCriticalPods: d("5s")},
			wantErr: "must not be greater than shutdownGracePeriod",
		},
		{
			name:    "negative total",
			kc:      &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("-1s")},
			wantErr: "must not be negative",
		},
		{
			name: "by priority sorted ascending",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriodByPodPriority: []byPrio{
				{Priority: 100000, ShutdownGracePeriodSeconds: 20},
				{Priority: 2000000000, ShutdownGracePeriodSeconds: 10},
				{Priority: 0, ShutdownGracePeriodSeconds: 60},
				{Priority: -5, ShutdownGracePeriodSeconds: 5},
			}},
			want: []Group{
				{Priority: -5, GracePeriod: 5 * time.Second},
				{Priority: 0, GracePeriod: 60 * time.Second},
				{Priority: 100000, GracePeriod: 20 * time.Second},
				{Priority: 2000000000, GracePeriod: 10 * time.Second},
			},
		},
		{
			name: "both styles",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriod: d("30s"),
				ShutdownGracePeriodByPodPriority: []byPrio{{Priority: 0, ShutdownGracePeriodSeconds: 10}}},
			wantErr: "cannot be combined",
		},
		{
			name: "both styles (critical only)",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriodCriticalPods: d("5s"),
				ShutdownGracePeriodByPodPriority: []byPrio{{Priority: 0, ShutdownGracePeriodSeconds: 10}}},
			wantErr: "cannot be combined",
		},
		{
			name:    "negative seconds by priority",
			kc:      &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriodByPodPriority: []byPrio{{Priority: 0, ShutdownGracePeriodSeconds: -1}}},
			wantErr: "must not be negative",
		},
		{
			name: "duplicate priority",
			kc: &kubeletconfigv1beta1.KubeletConfiguration{ShutdownGracePeriodByPodPriority: []byPrio{
				{Priority: 7, ShutdownGracePeriodSeconds: 1}, {Priority: 7, ShutdownGracePeriodSeconds: 2}}},
			wantErr: "listed twice",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Groups(tt.kc)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Groups() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Groups() error = %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Groups() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestTotalGrace(t *testing.T) {
	if got := TotalGrace([]Group{{0, 20 * time.Second}, {5, 7 * time.Second}}); got != 27*time.Second {
		t.Fatalf("TotalGrace = %s, want 27s", got)
	}
	if got := TotalGrace(nil); got != 0 {
		t.Fatalf("TotalGrace(nil) = %s, want 0", got)
	}
}
