// Command pause is the e2e rig's sandbox ("infra") container process: it holds the pod's
// namespaces open, reaps zombies (it is PID 1 when the pod shares its PID namespace) and exits
// on SIGTERM or SIGINT so that StopPodSandbox is quick. Built statically (CGO_ENABLED=0) into
// the nodelet.local/pause image by test/rig/up.sh.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("nodelet-rig pause")
		return
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		switch sig {
		case syscall.SIGCHLD:
			reap()
		default:
			fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", sig)
			os.Exit(0)
		}
	}
}

// reap collects every exited child; signals coalesce, so one SIGCHLD may stand for many.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
