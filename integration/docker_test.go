package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The Docker backend, through testcontainers-go: used when
// REDLOCK_BACKEND=docker, or when there is no redis-server binary and a
// Docker engine answers. Each node is one container running redis-server
// on the host's network, on a free loopback port, so tests reach it at
// 127.0.0.1 as they reach a process (and need no port mapping, which a
// daemon started with --bridge=none cannot do). Kill is docker kill,
// Pause and Resume are docker pause and unpause (the cgroup freezer: the
// server stops like under SIGSTOP). Restarts, persistence, clock skew,
// TLS, Sentinel and Cluster need processes the harness starts itself.
//
// REDLOCK_REDIS_IMAGE names the image (default redis:7.0, Debian
// bookworm's Redis version, for CI that can pull it). Where no registry is
// reachable, integration/redis-image.sh builds one from Debian's
// redis-server; .ci/run does so. Set TESTCONTAINERS_RYUK_DISABLED=true
// where the reaper image cannot be pulled: the harness terminates every
// container it started when each test ends and when the test binary exits.

// defaultRedisImage matches the Redis version of Debian bookworm's
// redis-server.
const defaultRedisImage = "redis:7.0"

func redisImage() string {
	if img := os.Getenv("REDLOCK_REDIS_IMAGE"); img != "" {
		return img
	}
	return defaultRedisImage
}

// dockerReachable reports whether a Docker engine answers a ping. It also
// quiets testcontainers, which otherwise prints a banner and every step.
func dockerReachable() error {
	tclog.SetDefault(tclog.NewNoopLogger())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	_, err = cli.Ping(ctx, client.PingOptions{})
	return err
}

// startContainer starts one redis-server container on a free loopback
// port of the host's network and waits until it accepts connections. A
// container whose port another process took in between exits without
// that log line; it is removed and another port tried, up to 3 times.
func startContainer(t testing.TB) *Node {
	t.Helper()
	var errs []error
	for range 3 {
		port := freePort(t)
		ctr, err := runContainer(t, port)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		cli, err := testcontainers.NewDockerClientWithOpts(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cli.Close() })
		n := &Node{Addr: fmt.Sprintf("127.0.0.1:%d", port), ctr: ctr, docker: cli}
		startedMu.Lock()
		started = append(started, n)
		startedMu.Unlock()
		return n
	}
	t.Fatalf("start a %s container: %v", redisImage(), errors.Join(errs...))
	return nil
}

// runContainer starts the container for startContainer; it is removed when
// the test ends, or at once if it did not start.
func runContainer(t testing.TB, port int) (testcontainers.Container, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	req := testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image: redisImage(),
			Cmd: []string{"redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
				"--protected-mode", "no", "--save", "", "--appendonly", "no"},
			HostConfigModifier: func(hc *container.HostConfig) { hc.NetworkMode = "host" },
			// testcontainers attaches every container to a bridge network of
			// its own; on the host's network there is nothing to attach.
			EndpointSettingsModifier: func(m map[string]*network.EndpointSettings) { clear(m) },
			WaitingFor:               wait.ForLog("Ready to accept connections").WithStartupTimeout(time.Minute),
			Labels:                   map[string]string{"redlock.test": "integration"},
		},
		Started: true,
	}
	ctr, err := testcontainers.GenericContainer(ctx, req)
	if err != nil {
		if ctr != nil {
			_ = ctr.Terminate(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	testcontainers.CleanupContainer(t, ctr)
	return ctr, nil
}

func (n *Node) dockerKill(t testing.TB) {
	t.Helper()
	if _, err := n.docker.ContainerKill(context.Background(), n.ctr.GetContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil &&
		!strings.Contains(err.Error(), "is not running") {
		t.Fatal(err)
	}
}

func (n *Node) dockerPause(t testing.TB) {
	t.Helper()
	if _, err := n.docker.ContainerPause(context.Background(), n.ctr.GetContainerID(), client.ContainerPauseOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (n *Node) dockerResume(t testing.TB) {
	t.Helper()
	if _, err := n.docker.ContainerUnpause(context.Background(), n.ctr.GetContainerID(), client.ContainerUnpauseOptions{}); err != nil &&
		!strings.Contains(err.Error(), "is not paused") {
		t.Fatal(err)
	}
}
