# The two commands a newcomer needs: `make demo` and `make test`.
GO ?= go
export GOWORK := off

.PHONY: demo test quickstart lockdemo serve bench fuzz api

## demo: run the demo (the examples module is a module of its own)
demo: quickstart

## quickstart: a retry storm against the demo service, executed once
quickstart:
	cd examples && $(GO) run ./quickstart

## serve: the demo service on net/http at 127.0.0.1:8080 (memory backend)
serve:
	cd examples && $(GO) run ./nethttp -addr 127.0.0.1:8080

## lockdemo: the lock layer on the in-memory backend
lockdemo:
	cd examples && $(GO) run ./lockdemo

## test: gofmt, vet, tidy and race-enabled tests of every module
test:
	@scripts/test.sh

## bench: the root module's benchmarks, with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## fuzz: every fuzz target for FUZZTIME each (default 30s)
FUZZTIME ?= 30s
fuzz:
	@FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

## api: count the exported names of every released package
api:
	@scripts/api.sh
