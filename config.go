package redlock

// This file is a Client's settings (config, and lockConfig for one lock),
// their limits and defaults, and how options apply to them; the options
// themselves are in options.go.

import (
	"time"
)

// Limits on arguments; larger (or smaller) values are rejected with
// ErrInvalidArgument. The option docs state them.
const (
	maxKeyLen      = 1024                // bytes in a lock key
	maxMetadataLen = 4096                // bytes of holder metadata
	maxTokenLen    = 256                 // bytes in a token given to WithToken
	minTTL         = time.Millisecond    // and the TTL must also leave positive validity after drift
	maxTTL         = 24 * time.Hour      // TTL of a lock, extension or cooldown
	maxMaxHold     = 30 * 24 * time.Hour // WithMaxHold
)

// Defaults, as the option docs state them.
const (
	defaultTTL         = 10 * time.Second
	defaultDriftFactor = 0.01
	defaultKeyPrefix   = "redlock:"
	defaultMaxHold     = time.Hour
	// An auto-extended lock is extended every TTL/3 unless WithAutoExtend
	// gives an interval.
	extendDivisor = 3
	// An auto-extended lock that could not be extended ends with TTL/10 of
	// validity left, so that the work has that long to stop before another
	// client can take the lock.
	endMarginDivisor = 10
	// A waiting Lock's place in a key's wait queue lapses after this long
	// without a refresh; a waiter refreshes it every lease/3.
	defaultWaiterLease = time.Second
	minWaiterLease     = 10 * time.Millisecond
	maxWaiterLease     = time.Hour
)

// defaultRetry is the strategy Lock uses when none is given: a random delay
// in [10 ms, 200 ms), until the context ends.
var defaultRetry = RandomBackoff(10*time.Millisecond, 200*time.Millisecond)

// config is a Client's settings.
type config struct {
	lock        lockConfig // defaults for every lock
	drift       float64
	nodeTimeout time.Duration // 0: TTL / nodeTimeoutDivisor
	prefix      string
	anyCount    bool
	observers   []Observer
	guard       time.Duration // restart guard period; 0 off
	guardSet    bool
	lease       time.Duration // a waiter's entry in a wait queue lives this long unrefreshed
}

// lockConfig is one lock's settings.
type lockConfig struct {
	ttl        time.Duration
	retry      RetryStrategy
	meta       string
	token      string
	autoExtend bool
	every      time.Duration // auto-extension interval; 0: ttl / extendDivisor
	maxHold    time.Duration
	fencing    bool
	onEnd      func(error) // Do: cancels fn's context when the lock ends early
	recampaign bool        // Election.Lead: campaign again after a lost leadership
	sweeping   bool        // a Semaphore's: its refusals' PTTLs bound its wait
}

func defaultConfig() config {
	return config{
		lock:   lockConfig{ttl: defaultTTL, retry: defaultRetry, maxHold: defaultMaxHold},
		drift:  defaultDriftFactor,
		prefix: defaultKeyPrefix,
		lease:  defaultWaiterLease,
	}
}

// Option configures a Client, given to New, or one call, given to Lock,
// TryLock, Do or Inspect. Each option's doc says where it applies; one given
// where it does not apply is rejected with ErrInvalidArgument. Options that
// apply to both set, in New, the default for every lock of the Client.
type Option interface {
	option() *option
}

// where an option applies.
type scope uint8

const (
	toClient   scope = 1 << iota // New
	toLock                       // Lock, TryLock, Do
	toInspect                    // Inspect
	toElection                   // Client.Election
	toLead                       // Election.Lead
)

type option struct {
	name   string
	scope  scope
	client func(*config) error     // for toClient; nil: sets c.lock with lock
	lock   func(*lockConfig) error // for toLock and toInspect
}

func (o *option) option() *option { return o }

func lockOption(name string, s scope, f func(*lockConfig) error) Option {
	return &option{name: name, scope: s, lock: f}
}

func clientOption(name string, f func(*config) error) Option {
	return &option{name: name, scope: toClient, client: f}
}

// applyClient applies opts to a Client's settings.
func applyClient(cfg *config, opts []Option) error {
	for _, o := range opts {
		if o == nil || o.option() == nil {
			return invalid("nil option")
		}
		op := o.option()
		var err error
		switch {
		case op.scope == toLead:
			err = invalid("%s applies to Election.Lead only", op.name)
		case op.scope&toClient == 0:
			err = invalid("%s applies to one lock: pass it to Lock, TryLock or Do, not to New", op.name)
		case op.client != nil:
			err = op.client(cfg)
		default:
			err = op.lock(&cfg.lock)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyCall applies opts, given to a call of scope s (toLock or toInspect),
// to lc.
func applyCall(lc *lockConfig, s scope, opts []Option) error {
	for _, o := range opts {
		if o == nil || o.option() == nil {
			return invalid("nil option")
		}
		op := o.option()
		switch {
		case op.scope&s != 0:
			if err := op.lock(lc); err != nil {
				return err
			}
		case s == toInspect:
			return invalid("%s does not apply to Inspect, which takes only WithToken", op.name)
		case s == toElection:
			return invalid("%s does not apply to an Election, which takes WithTTL, WithRetry and WithAutoExtend", op.name)
		case s == toLead:
			return invalid("%s does not apply to Lead, which takes only WithRecampaign", op.name)
		case op.scope == toLead:
			return invalid("%s applies to Election.Lead only", op.name)
		default:
			return invalid("%s applies to the Client: pass it to New", op.name)
		}
	}
	return nil
}

func checkDuration(what string, d time.Duration) error {
	switch {
	case d < minTTL:
		return invalid("%s %v is less than %v", what, d, minTTL)
	case d > maxTTL:
		return invalid("%s %v is more than %v", what, d, maxTTL)
	}
	return nil
}

func checkKey(key string) error {
	switch {
	case key == "":
		return invalid("empty key")
	case len(key) > maxKeyLen:
		return invalid("key is %d bytes, more than %d", len(key), maxKeyLen)
	}
	return nil
}
