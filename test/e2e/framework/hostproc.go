package framework

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// hostProc is a helper process a test runs on the host beside nodelet (a CSI sidecar, a
// device plugin): its output goes to its log, and it dies with the test binary.
type hostProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error
}

// startHostProc starts cmd with stdout and stderr appended to logPath, framed by start and
// exit lines.
func startHostProc(name, logPath string, cmd *exec.Cmd) (*hostProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", logPath, err)
	}
	fmt.Fprintf(logf, "=== %s framework: starting %s\n", time.Now().UTC().Format(time.RFC3339Nano), strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &hostProc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		fmt.Fprintf(logf, "=== %s framework: exited: %v\n", time.Now().UTC().Format(time.RFC3339Nano), errOrOK(p.err))
		logf.Close()
		close(p.done)
	}()
	return p, nil
}

// exited is an error naming the process if it has exited, nil while it runs.
func (p *hostProc) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%s); log %s", p.name, errOrOK(p.err), p.log)
	default:
		return nil
	}
}

// wait waits for the exit, killing the process after timeout; killed says it had to.
func (p *hostProc) wait(timeout time.Duration) (killed bool) {
	select {
	case <-p.done:
		return false
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return true
	}
}

// RigBin is the path of a binary test/rig/build-bins.sh built into the rig's RIG_BIN_DIR; the
// test fails if it is not there.
func (f *Framework) RigBin(name string) string {
	f.T.Helper()
	dir := f.Env.All["RIG_BIN_DIR"]
	if dir == "" {
		f.T.Fatalf("rig.env has no RIG_BIN_DIR (is the rig up? run test/rig/up.sh)")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		f.T.Fatalf("%s: %v (run test/rig/build-bins.sh)", name, err)
	}
	return p
}
