// grpcproxy: a passthrough gRPC proxy written with grpc-go, the baseline for the relay. Every
// method, unary or streaming, is forwarded as bytes to the backend over one connection.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"kre-bench/rawcodec"
)

func main() {
	listen := flag.String("listen", "", "unix socket to serve")
	backend := flag.String("backend", "", "unix socket of the runtime")
	flag.Parse()
	conn, err := grpc.Dial("unix://"+*backend, grpc.WithInsecure(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", *backend)
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawcodec.Codec{}), grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		fail(err)
	}
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	handler := func(srv interface{}, in grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(in)
		md, _ := metadata.FromIncomingContext(in.Context())
		ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(in.Context(), md.Copy()))
		defer cancel()
		out, err := conn.NewStream(ctx, desc, method)
		if err != nil {
			return err
		}
		errs := make(chan error, 1)
		go func() {
			for {
				f := &rawcodec.Frame{}
				if err := in.RecvMsg(f); err != nil {
					if err == io.EOF {
						errs <- out.CloseSend()
					} else {
						errs <- err
					}
					return
				}
				if err := out.SendMsg(f); err != nil {
					errs <- err
					return
				}
			}
		}()
		header, err := out.Header()
		if err != nil {
			return err
		}
		if err := in.SendHeader(header); err != nil {
			return err
		}
		for {
			f := &rawcodec.Frame{}
			if err := out.RecvMsg(f); err != nil {
				in.SetTrailer(out.Trailer())
				if err == io.EOF {
					return nil
				}
				return err
			}
			if err := in.SendMsg(f); err != nil {
				return err
			}
		}
	}
	os.Remove(*listen)
	lis, err := net.Listen("unix", *listen)
	if err != nil {
		fail(err)
	}
	server := grpc.NewServer(grpc.CustomCodec(rawcodec.Codec{}), grpc.UnknownServiceHandler(handler),
		grpc.MaxRecvMsgSize(16<<20))
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; server.Stop() }()
	fmt.Println("serving", *listen)
	if err := server.Serve(lis); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "grpcproxy:", err)
	os.Exit(1)
}
