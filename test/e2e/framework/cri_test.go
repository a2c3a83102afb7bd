package framework

import (
	"errors"
	"reflect"
	"testing"
)

func TestLeakedTaskID(t *testing.T) {
	id := "2a5d20fedb23a190e9a3f57f49df95d22706b5ba6ec19171aae1219524e8f34f"
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("rpc error: code = NotFound desc = an error occurred when try to find container"), ""},
		// containerd 2.4's refusal, as RemovePodSandbox wraps it.
		{errors.New(`rpc error: code = FailedPrecondition desc = failed to remove container "` + id + `": failed to delete containerd container "` + id + `": cannot delete running task ` + id + `: failed precondition`), id},
		{errors.New("cannot delete running task abc: failed precondition"), ""}, // not a container ID
	} {
		if got := LeakedTaskID(tc.err); got != tc.want {
			t.Errorf("LeakedTaskID(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

func TestParseCtrTasks(t *testing.T) {
	out := "TASK                                                                PID      STATUS    \n" +
		"2a5d20fedb23a190e9a3f57f49df95d22706b5ba6ec19171aae1219524e8f34f    31417    CREATED    \n" +
		"8ab7222c4c4f66659361e15502c8d294d4759c2befffb52f3d52b7fd73fc03a9    31001    RUNNING    \n"
	want := map[string]string{
		"2a5d20fedb23a190e9a3f57f49df95d22706b5ba6ec19171aae1219524e8f34f": "CREATED",
		"8ab7222c4c4f66659361e15502c8d294d4759c2befffb52f3d52b7fd73fc03a9": "RUNNING",
	}
	if got := ParseCtrTasks(out); !reflect.DeepEqual(got, want) {
		t.Errorf("ParseCtrTasks = %v, want %v", got, want)
	}
	if got := ParseCtrTasks("TASK    PID    STATUS    \n"); len(got) != 0 {
		t.Errorf("no tasks: got %v", got)
	}
}
