// grpcprobe: does what the kubelet's gRPC probe does (grpc.health.v1.Health/Check of one service
// name, plaintext), so tests can run the chart's probe against a real server.
//
//	grpcprobe -addr HOST:PORT -service NAME [-count N] [-timeout 5s]
//
// Prints the status of each check ("SERVING", "NOT_SERVING", or "error: <gRPC code>: <message>")
// and exits 0 only if every check returned SERVING, 1 otherwise, 2 on a usage error.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "", "server address, HOST:PORT")
	service := flag.String("service", "", "service name to check (\"\" is the whole server)")
	count := flag.Int("count", 1, "checks to make on one connection")
	timeout := flag.Duration("timeout", 5*time.Second, "deadline of the connection and of each check")
	flag.Parse()
	if *addr == "" || *count < 1 || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	conn, err := grpc.DialContext(ctx, *addr, grpc.WithInsecure(), grpc.WithBlock())
	cancel()
	if err != nil {
		fmt.Printf("error: cannot connect to %s: %v\n", *addr, err)
		os.Exit(1)
	}
	defer conn.Close()

	client := grpc_health_v1.NewHealthClient(conn)
	ok := true
	for i := 0; i < *count; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		resp, err := client.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: *service})
		cancel()
		if err != nil {
			s := status.Convert(err)
			fmt.Printf("error: %s: %s\n", s.Code(), s.Message())
			ok = false
			continue
		}
		fmt.Println(resp.GetStatus())
		if resp.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
			ok = false
		}
	}
	if !ok {
		os.Exit(1)
	}
}
