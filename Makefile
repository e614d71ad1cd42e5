# The two commands a newcomer needs: `make demo` and `make test`.
# `make help` lists every target.
GO ?= go

.PHONY: help demo quickstart test check serve lockdemo bench fuzz api

## demo: the quickstart on the in-memory backend (a retry storm run once,
##   a 409, a replay and a refusal as a client sees them, a lost response
##   recovered by the retrying client). It builds from the root module only
##   (about 200 packages, most of them the standard library's; 25-27 s on
##   2 cores with empty module and build caches, a second after) and shows
##   its progress; scripts/demo.sh
demo: quickstart

## quickstart: the same as demo
quickstart:
	@GO=$(GO) scripts/demo.sh

## serve: the demo service on net/http at 127.0.0.1:8080 (memory backend);
##   it builds the whole examples module (every backend's SDK) the first time
serve:
	cd examples && $(GO) run ./nethttp -addr 127.0.0.1:8080

## lockdemo: the lock layer on the in-memory backend
lockdemo:
	cd examples && $(GO) run ./lockdemo

## test: install what the tests need when it is missing (scripts/deps.sh:
##   redis-server, PostgreSQL, Java and the Firestore emulator, via apt),
##   then gofmt, vet and race-enabled tests of every module, and the
##   outside-consumer check (go run ./internal/modcheck: tidy, builds,
##   go install of the command, module graphs)
test:
	@scripts/deps.sh
	@scripts/test.sh

## check: the everyday loop: gofmt, vet and tests (no -race) of the root
##   module and of the modules changed against origin/main (or, without it,
##   the uncommitted changes); scripts/check.sh
check:
	@scripts/deps.sh
	@scripts/check.sh

## bench: the root module's benchmarks, with allocations
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

## fuzz: every fuzz target for FUZZTIME each (default 30s)
FUZZTIME ?= 30s
fuzz:
	@FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

## api: count the exported names of every released package, and the lines
##   of released non-test Go
api:
	@scripts/api.sh

## help: this list
help:
	@sed -n 's/^## \{0,1\}//p' $(MAKEFILE_LIST)
