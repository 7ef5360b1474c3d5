package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/redlock-go/redlock"
)

// One active replica: every replica runs this; one leads and runs the
// scheduler, the others wait in Campaign and take over when it resigns
// (here, at SIGTERM) or dies.
func ExampleElection_Lead() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	election, err := c.Election("scheduler")
	if err != nil {
		log.Fatal(err)
	}
	err = election.Lead(ctx, "host=web-1", func(ctx context.Context, ld *redlock.Leadership) error {
		// Every write to a shared system carries ld.Term(): the system
		// refuses terms below the largest it has seen (docs/election.md).
		log.Printf("leading in term %d", ld.Term())
		<-ctx.Done() // the work, until SIGINT or the leadership is lost
		return ctx.Err()
	}, redlock.WithRecampaign())
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

func ExampleElection_Campaign() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	election, err := c.Election("partition-7", redlock.WithTTL(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	ld, err := election.Campaign(ctx, "10.0.0.9:8080")
	if err != nil {
		log.Fatal(err)
	}
	defer ld.Resign(context.Background())
	for {
		select {
		case <-ld.Lock().Done():
			log.Printf("no longer leading: %v", ld.Lock().Err())
			return
		case <-time.After(time.Second):
			fmt.Println("serving partition 7 in term", ld.Term())
		}
	}
}

func ExampleElection_Observe() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	election, err := c.Election("partition-7")
	if err != nil {
		log.Fatal(err)
	}
	// The current leader, then each new one, in term order.
	for l := range election.Observe(context.Background()) {
		fmt.Printf("term %d: %s\n", l.Term, l.Value)
	}
}

func ExampleElection_Leader() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	election, err := c.Election("partition-7")
	if err != nil {
		log.Fatal(err)
	}
	l, err := election.Leader(context.Background())
	switch {
	case errors.Is(err, redlock.ErrNoLeader):
		fmt.Println("nobody leads partition 7")
	case err != nil:
		log.Fatal(err) // too few nodes answered to tell
	default:
		fmt.Printf("send partition 7's requests to %s (term %d)\n", l.Value, l.Term)
	}
}
