package checksum

import (
	"errors"
	"testing"
)

type sample struct {
	Name     string
	Checksum Checksum
}

func TestChecksum(t *testing.T) {
	a, b := New(`{"entries":{}}`), New(`{"entries":{"x":1}}`)
	if a != New(`{"entries":{}}`) {
		t.Error("the same data hashed twice differs")
	}
	if a == b {
		t.Error("different data, same checksum")
	}
	if a > 1<<32-1 {
		t.Errorf("checksum %d is wider than FNV-32a", a)
	}
	if err := a.Verify(`{"entries":{}}`); err != nil {
		t.Errorf("Verify: %v", err)
	}
	var ce *CorruptError
	if err := a.Verify(`{}`); !errors.As(err, &ce) || ce.Expected != a {
		t.Errorf("Verify of other data: %v", err)
	}
}

// The type's name is part of the checksum: NewRenamed hashes it under
// another, which is how upstream's versioned types stay readable by older
// kubelets.
func TestNewRenamed(t *testing.T) {
	s := &sample{Name: "x"}
	if New(s) == NewRenamed(s, "checksum.sample", "checksum.other") {
		t.Error("renaming the type does not change the checksum")
	}
	if New(s) != NewRenamed(s, "no such text", "y") {
		t.Error("a rename that matches nothing changed the checksum")
	}
	if err := NewRenamed(s, "sample", "other").VerifyRenamed(s, "sample", "other"); err != nil {
		t.Error(err)
	}
}
