package checkpoint

import "testing"

func TestChecksumIsStableAndDiscriminates(t *testing.T) {
	a, b := Checksum(`{"entries":{}}`), Checksum(`{"entries":{"x":1}}`)
	if a != Checksum(`{"entries":{}}`) {
		t.Error("the same data hashed twice differs")
	}
	if a == b {
		t.Error("different data, same checksum")
	}
	if a > 1<<32-1 {
		t.Errorf("checksum %d is wider than FNV-32a", a)
	}
}
