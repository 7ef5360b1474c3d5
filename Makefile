# The README's two set-up commands are `go run ./cmd/redlock demo` (also
# `make demo`) and `make test`, which installs redis-server from Debian's
# packages when it is missing.

GO ?= go
export PATH := $(PATH):/usr/local/go/bin

.PHONY: demo test lint test-docker bench bench-go chaos sim fuzz redis-server

# Needs nothing but Go: embedded nodes unless redis-server is installed.
demo:
	$(GO) run ./cmd/redlock demo

# Every package of every module in go.work: the library, the command, the
# integration suite, the otel module, and the bench module's own tests.
PKGS = github.com/redlock-go/redlock/...

# The integration suite takes about 3 minutes (3.5 beside a CPU hog on 2
# cores); the limit per package is set to 30 minutes, so only a hang ends
# it. Then the seeded simulator's 1,000 seeds (about 30 s on 2 quiet
# cores) and its catalogue of mutants, each of which must be caught (a
# build with -tags redlock_mutants: docs/testing.md).
test: redis-server
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	$(GO) test -count=1 -run 'TestSimulation$$' -sim.seeds=1000 .
	$(GO) test -count=1 -run 'TestSimulation$$' -sim.seeds=300 -sim.first=500001 -sim.perkey .
	$(GO) test -count=1 -tags redlock_mutants -run 'TestSimulationMutants|MutantsCaught' .

# staticcheck (honnef.co/go/tools, pinned) on every module of go.work,
# also with the build tags some files need; .ci/run runs it before the
# tests. It installs into .bin/ (about a minute the first time).
STATICCHECK_VERSION = v0.8.2
STATICCHECK = $(CURDIR)/.bin/staticcheck
lint:
	$(GO) run .ci/sizes.go
	GOBIN=$(CURDIR)/.bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(STATICCHECK) ./...
	$(STATICCHECK) -tags redlock_mutants ./...
	$(GO) vet -tags redlock_search .
	cd otel && $(STATICCHECK) ./...
	cd cmd/redlock && $(STATICCHECK) ./...
	cd bench && $(STATICCHECK) ./...
	cd integration && $(STATICCHECK) ./... && $(STATICCHECK) -tags chaos ./...

# The simulator's long profile: 50,000 seeds (about 25 minutes on 2 cores).
sim:
	$(GO) test -count=1 -timeout 120m -run 'TestSimulation$$' -sim.seeds=50000 .

# Every fuzz target of the repository (each _test.go's func Fuzz...) for
# FUZZTIME each, one after the other: 7 targets, about 4 minutes at the
# default 30s. An input that fails is written to its package's
# testdata/fuzz/, where plain go test runs it from then on: commit it
# with the fix (docs/testing.md, "Fuzzing").
FUZZTIME ?= 30s
fuzz:
	@set -e; grep -rHo --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sort | while IFS=: read -r file decl; do \
	  name=$${decl#func }; dir=$$(dirname "$$file"); \
	  echo "== $$dir $$name"; \
	  $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$dir"; \
	done

# The integration suite's fault tests on containers through testcontainers
# (REDLOCK_BACKEND=docker; see docs/testing.md): needs a Docker engine, and
# REDLOCK_REDIS_IMAGE where redis:7.0 cannot be pulled (.ci/run builds one
# with integration/redis-image.sh).
DOCKER_TESTS = TestMutualExclusionUnderFaults|TestMinorityKilled|TestHungNode
test-docker:
	REDLOCK_BACKEND=docker $(GO) test -race -count=1 -run '$(DOCKER_TESTS)' ./integration

# redlock side by side with redsync, bsm/redislock and the floor; rewrites
# the generated part of docs/performance.md and the charts in docs/bench/.
bench: redis-server
	cd bench && $(GO) run .

# The library's own testing.B benchmarks against real redis-server (see
# docs/performance.md). The hung-node benchmark is run for a fixed count:
# each Unlock waits one node timeout.
bench-go: redis-server
	$(GO) test ./integration -run '^$$' -bench 'LockUnlock|Floor|VsFloor|Semaphore|MultiLock|RWMutex' -benchtime 3000x -count 6
	$(GO) test ./integration -run '^$$' -bench 'HungNode' -benchtime 200x -count 3
	$(GO) test ./integration -run '^$$' -bench 'Handoff' -benchtime 2000x -count 5
	$(GO) test . -run '^$$' -bench . -count 6

# The chaos suite's long profile: 25x the acquisitions of the short one that
# make test runs, and the canaries on random workloads, which report how
# many violations each run found (see docs/reliability.md).
chaos: redis-server
	REDLOCK_CHAOS=long $(GO) test -tags chaos -race -count=1 -timeout 120m -v -run 'TestChaos' ./integration

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server from Debian's packages"; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq redis-server >/dev/null; }
