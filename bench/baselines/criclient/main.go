// criclient: a CRI client in Go, as kubelet is one: unary calls on one gRPC connection to a
// unix socket, from 1 or more goroutines, the request given as hex-encoded protobuf bytes.
// Prints one JSON line: calls, errors, seconds, p50/p99/max in microseconds.
package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"

	"kre-bench/rawcodec"
)

func main() {
	socket := flag.String("socket", "", "unix socket of the runtime or the relay")
	method := flag.String("method", "/runtime.v1.RuntimeService/Version", "full gRPC method")
	request := flag.String("request", "", "the request message, hex-encoded protobuf")
	calls := flag.Int("calls", 2000, "calls in all")
	concurrency := flag.Int("concurrency", 1, "goroutines sharing the connection")
	warmup := flag.Int("warmup", 50, "calls made before timing")
	timeout := flag.Duration("timeout", 10*time.Second,
		"each call's deadline, set per call as kubelet does (its runtime-request-timeout: 2m)")
	flag.Parse()
	payload, err := hex.DecodeString(*request)
	if err != nil {
		fail(err)
	}
	conn, err := grpc.Dial("unix://"+*socket, grpc.WithInsecure(),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", *socket)
		}),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(rawcodec.Codec{}), grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	call := func() error {
		in := &rawcodec.Frame{Payload: payload}
		out := &rawcodec.Frame{}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		return conn.Invoke(ctx, *method, in, out)
	}
	for i := 0; i < *warmup; i++ {
		if err := call(); err != nil {
			fail(err)
		}
	}
	latencies := make([]time.Duration, *calls)
	errors := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	start := time.Now()
	for g := 0; g < *concurrency; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= *calls {
					return
				}
				t := time.Now()
				err := call()
				latencies[i] = time.Since(t)
				if err != nil {
					mu.Lock()
					errors++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	pct := func(q float64) float64 {
		i := int(q*float64(len(latencies)) + 0.5) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(latencies) {
			i = len(latencies) - 1
		}
		return float64(latencies[i].Nanoseconds()) / 1000
	}
	out, _ := json.Marshal(map[string]interface{}{
		"calls": *calls, "errors": errors, "seconds": elapsed.Seconds(),
		"p50_us": pct(0.50), "p99_us": pct(0.99), "max_us": pct(1.0),
	})
	fmt.Println(string(out))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "criclient:", err)
	os.Exit(1)
}
