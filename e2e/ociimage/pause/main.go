// Command pause is the node's sandbox image: the first process of every
// Pod, which holds its namespaces and waits, as registry.k8s.io/pause does.
// Images cannot be pulled here, so the e2e suite builds it (ociimage -pause).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of a Pod that shares its process namespace, it reaps what
	// other containers leave behind.
	signal.Ignore(syscall.SIGCHLD)
	<-stop
}
