package hostsetup

import (
	"strings"
	"testing"

	"github.com/nodelet/nodelet/cgroups"
)

func TestCheckCgroupVersion(t *testing.T) {
	tests := []struct {
		mode    cgroups.Mode
		fail    bool
		wantErr bool
	}{
		{cgroups.ModeV2, true, false},
		{cgroups.ModeV2, false, false},
		{cgroups.ModeHybrid, true, true}, // hybrid counts as v1, as upstream
		{cgroups.ModeV1, true, true},
		{cgroups.ModeV1, false, false},
	}
	for _, tt := range tests {
		err := CheckCgroupVersion(tt.mode, tt.fail)
		if (err != nil) != tt.wantErr {
			t.Errorf("CheckCgroupVersion(%v, %v) = %v, want error %v", tt.mode, tt.fail, err, tt.wantErr)
		}
		if err != nil && (!strings.Contains(err.Error(), "failCgroupV1: false") || !strings.Contains(err.Error(), tt.mode.String())) {
			t.Errorf("error %q does not name the mode and how to allow it", err)
		}
	}
}
