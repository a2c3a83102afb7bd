package statussync

import (
	"testing"

	"github.com/nodelet/nodelet/internal/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
