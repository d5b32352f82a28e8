# Every routine command. `make run` and `make test` set up a fresh
# Debian/Ubuntu machine themselves (.ci/deps.sh).

GO      ?= go
BIN     ?= bin/meshtray
ARGS    ?=
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X meshtray/app.Version=$(VERSION)

export LANG     := C.UTF-8
export LANGUAGE := en

.PHONY: all build run test bench fuzz vet cross package deps-run deps-test clean

all: build

deps-run:
	@.ci/deps.sh run

deps-test:
	@.ci/deps.sh test

build: deps-run
	CGO_ENABLED=1 $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) .

# Runs meshtray: the tray app when a desktop session is present, otherwise
# the headless node. Extra flags: make run ARGS='--port 47700'.
run: build
	@.ci/run-local.sh $(BIN) $(ARGS)

test: deps-test
	.ci/test.sh

vet:
	$(GO) vet ./...

bench: deps-test
	.ci/bench.sh

clean:
	rm -rf bin dist
