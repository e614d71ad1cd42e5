# The two commands a newcomer needs: `make demo` and `make test`.
# `make help` lists every target.
GO ?= go
export GOWORK := off

.PHONY: help demo quickstart test check serve lockdemo bench fuzz api

## demo: the quickstart on the in-memory backend (a retry storm run once,
##   a 409, a replay and a refusal as a client sees them, a lost response
##   recovered by the retrying client). It builds from the root module only
##   (about 200 packages, seconds the first time) and shows its progress.
demo: quickstart

# QUICKSTART_BIN is where the quickstart is built: kept between runs, so a
# warm `make demo` neither compiles nor links.
QUICKSTART_BIN ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/idemkit/quickstart

## quickstart: the same as demo
quickstart:
	@mkdir -p "$(dir $(QUICKSTART_BIN))"
	@cd examples/quickstart && { $(GO) build -v -o "$(QUICKSTART_BIN)" . 2>&1; echo "go-build-exit $$?"; } | awk ' \
		/^go-build-exit [0-9]+$$/ { rc = $$2; next } \
		!said { said = 1; print "make demo: building the quickstart and what it imports (the first time: about 200 packages)" } \
		/^[^ :]+$$/ { \
			n++; \
			last = $$0; \
			if (n % 25 == 0) printf "  %3d packages compiled (%s)\n", n, last; \
			next \
		} \
		{ print } \
		END { if (n % 25 != 0) printf "  %3d packages compiled (%s)\n", n, last; if (n) print "make demo: running it"; exit rc }'
	@"$(QUICKSTART_BIN)"

## serve: the demo service on net/http at 127.0.0.1:8080 (memory backend);
##   it builds the whole examples module (every backend's SDK) the first time
serve:
	cd examples && $(GO) run ./nethttp -addr 127.0.0.1:8080

## lockdemo: the lock layer on the in-memory backend
lockdemo:
	cd examples && $(GO) run ./lockdemo

## test: install what the tests need when it is missing (scripts/deps.sh:
##   redis-server, PostgreSQL, Java and the Firestore emulator, via apt),
##   then gofmt, vet, tidy and race-enabled tests of every module
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

## api: count the exported names of every released package
api:
	@scripts/api.sh

## help: this list
help:
	@sed -n 's/^## \{0,1\}//p' $(MAKEFILE_LIST)
