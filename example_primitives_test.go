package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redlock-go/redlock"
)

// At most 4 reports at once across every process, each holding a permit
// that is extended while it runs.
func ExampleSemaphore_Do() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	sem, err := c.Semaphore("reports-db", 4, redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	err = sem.Do(context.Background(), func(ctx context.Context) error {
		fmt.Println("one of at most 4 reports running")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

func ExampleSemaphore_TryAcquire() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	sem, err := c.Semaphore("api-calls", 10)
	if err != nil {
		log.Fatal(err)
	}
	permit, err := sem.TryAcquire(context.Background())
	if errors.Is(err, redlock.ErrNotObtained) {
		fmt.Println("10 calls in flight already: try later")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer permit.Unlock(context.Background())
	fmt.Println("calling the API under", permit.Key())
}

// Move money between two accounts holding both locks, or neither: a
// caller never holds one account while it waits for the other.
func ExampleClient_MultiLock() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	accounts, err := c.MultiLock([]string{"account:17", "account:42"}, redlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	err = accounts.Do(context.Background(), func(ctx context.Context) error {
		fmt.Println("moving 100 from account 17 to account 42")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// One key of a set held elsewhere: the set is not taken, and no key of it
// is left held.
func ExampleMultiLock_TryLock() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	m, err := c.MultiLock([]string{"order:{42}:items", "order:{42}:payment"})
	if err != nil {
		log.Fatal(err) // also on Cluster nodes, for keys in different hash slots
	}
	l, err := m.TryLock(context.Background())
	if errors.Is(err, redlock.ErrNotObtained) {
		fmt.Println("order 42 is busy: try later")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())
	fmt.Println("holding", l.Keys())
}

// Many processes serve from a catalog at once; a rebuild has it alone,
// and keeps new readers out while it waits for those inside.
func ExampleClient_RWMutex() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	catalog, err := c.RWMutex("catalog", redlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	err = catalog.RDo(context.Background(), func(ctx context.Context) error {
		fmt.Println("serving from the catalog beside other readers")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	err = catalog.Do(context.Background(), func(ctx context.Context) error {
		fmt.Println("rebuilding the catalog, alone")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// A reader that does not wait: while a writer holds or waits, it is
// refused at once.
func ExampleRWMutex_TryRLock() {
	c, err := redlock.New(nodes())
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(context.Background())
	catalog, err := c.RWMutex("catalog")
	if err != nil {
		log.Fatal(err)
	}
	r, err := catalog.TryRLock(context.Background())
	if errors.Is(err, redlock.ErrNotObtained) {
		fmt.Println("the catalog is being rebuilt: serve the cached copy")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer r.Unlock(context.Background())
	fmt.Println("reading the catalog")
}
