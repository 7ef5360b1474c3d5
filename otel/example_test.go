package redlockotel_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-go/redlock"
	redlockotel "github.com/redlock-go/redlock/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Wiring the adapter: metrics and spans through your providers (here
// SDK providers without exporters; use your OTLP exporters).
func ExampleNew() {
	mp := sdkmetric.NewMeterProvider()
	tp := sdktrace.NewTracerProvider()
	defer mp.Shutdown(context.Background())
	defer tp.Shutdown(context.Background())

	obs, err := redlockotel.New(redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp))
	if err != nil {
		log.Fatal(err)
	}
	var nodes []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, ContextTimeoutEnabled: true}))
	}
	locker, err := redlock.New(nodes, redlock.WithObserver(obs.Observe))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(context.Background())
	// Every Lock, Extend and Unlock now records metrics, and spans
	// parented on the context passed to them.
}
