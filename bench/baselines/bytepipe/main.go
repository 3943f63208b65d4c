// bytepipe: a do-nothing byte pipe between a unix socket and the runtime's, the floor under any
// relay in user space. Each connection is copied both ways as bytes, nothing parsed: what is
// left of a relay's cost is the two extra hops through a process (a wake-up, a read and a
// write each way).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	listen := flag.String("listen", "", "unix socket to serve")
	backend := flag.String("backend", "", "unix socket of the runtime")
	flag.Parse()
	ln, err := net.Listen("unix", *listen)
	if err != nil {
		fail(err)
	}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		os.Remove(*listen)
		os.Exit(0)
	}()
	for {
		client, err := ln.Accept()
		if err != nil {
			fail(err)
		}
		go pipe(client, *backend)
	}
}

func pipe(client net.Conn, backend string) {
	defer client.Close()
	upstream, err := net.Dial("unix", backend)
	if err != nil {
		return
	}
	defer upstream.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(upstream, client); done <- struct{}{} }()
	go func() { io.Copy(client, upstream); done <- struct{}{} }()
	<-done
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
