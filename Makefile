# The two commands a newcomer needs: `make demo` and `make test`.
GO ?= go
export GOWORK := off

.PHONY: demo test lockdemo bench fuzz

## demo: run the demo (the examples module is a module of its own)
demo: lockdemo

## lockdemo: the lock layer on the in-memory backend
lockdemo:
	cd examples && $(GO) run ./lockdemo

## test: gofmt, vet, tidy and race-enabled tests of every module
test:
	@scripts/test.sh

## bench: the root module's benchmarks, with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## fuzz: each fuzz target for FUZZTIME (default 30s)
FUZZTIME ?= 30s
fuzz:
	@for t in FuzzNormalizeKey FuzzStorageKey FuzzValidateID; do \
		$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) ./lock/ || exit 1; \
	done
