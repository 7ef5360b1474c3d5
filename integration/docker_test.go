package integration

import (
	"testing"

	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// The Docker backend, used only when there is no redis-server binary and a
// Docker engine answers. Pause and Resume map to docker pause / unpause,
// which freeze the container's processes like SIGSTOP.

type (
	pauseOptions   = client.ContainerPauseOptions
	unpauseOptions = client.ContainerUnpauseOptions
)

// redisImage matches the Redis version of Debian bookworm's redis-server.
const redisImage = "redis:7.0"

func startContainer(t testing.TB) *Node {
	t.Helper()
	ctr, err := tcredis.Run(t.Context(), redisImage)
	testcontainers.CleanupContainer(t, ctr)
	if err != nil {
		t.Fatalf("start %s container: %v", redisImage, err)
	}
	addr, err := ctr.Endpoint(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := testcontainers.NewDockerClientWithOpts(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return &Node{Addr: addr, ctr: ctr, docker: cli}
}
