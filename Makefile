# Every routine command. `make run` and `make test` set up a fresh
# Debian/Ubuntu machine themselves (.ci/deps.sh).

GO      ?= go
BIN     ?= bin/meshtray
# The windows (Fyne, OpenGL, cgo): their own executable, next to meshtray,
# which starts it for each window.
UI_BIN  ?= $(dir $(BIN))meshtray-ui
ARGS    ?=
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X meshtray/app.Version=$(VERSION)

export LANG     := C.UTF-8
export LANGUAGE := en

.PHONY: all build build-headless run test bench fuzz vet cross package deps-run deps-test clean

all: build

deps-run:
	@.ci/deps.sh run

deps-test:
	@.ci/deps.sh test

# Two executables from main.go: meshtray (CLI, node, tray menu; no Fyne,
# and no cgo on Linux, where fyne.io/systray speaks D-Bus in Go) and
# meshtray-ui (the Fyne windows, -tags meshtray_ui) next to it.
TRAY_CGO := $(if $(filter linux,$(shell $(GO) env GOOS)),0,1)
build: deps-run
	CGO_ENABLED=$(TRAY_CGO) $(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) .
	CGO_ENABLED=1 $(GO) build -tags meshtray_ui -ldflags '$(LDFLAGS)' -o $(UI_BIN) .

# A server build: the node and the CLI without the tray and its windows, so
# no cgo on any OS, no systray, one static binary (bin/meshtray-headless).
build-headless:
	CGO_ENABLED=0 $(GO) build -tags headless -ldflags '$(LDFLAGS)' -o $(BIN)-headless .

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

# The Fyne tool, pinned; `go run` fetches it into the module cache once.
FYNE ?= $(GO) run fyne.io/tools/cmd/fyne@v1.7.4

# Linux package (dist/meshtray-linux-amd64.tar.xz: both executables, the
# .desktop entry starting meshtray, the icon, and the archive's Makefile
# installing them) from FyneApp.toml and the binaries `make build` made
# with the version stamped in. The tool rewrites FyneApp.toml (build
# number, formatting): the file is put back as it was, so packaging never
# dirties the tree. It packs one executable; .ci/package-ui.sh adds
# meshtray-ui beside it.
package: build
	@mkdir -p dist && cp FyneApp.toml dist/.FyneApp.toml.keep
	$(FYNE) package --os linux --executable $(BIN) --release; st=$$?; \
	  cp dist/.FyneApp.toml.keep FyneApp.toml; rm -f dist/.FyneApp.toml.keep; exit $$st
	.ci/package-ui.sh meshtray.tar.xz $(UI_BIN)
	mv meshtray.tar.xz dist/meshtray-linux-amd64.tar.xz
	@echo "package: dist/meshtray-linux-amd64.tar.xz"

# Cross-platform checks: the Windows executables (meshtray needs no cgo
# there either; meshtray-ui, Fyne, is built with mingw-w64), then `go vet`
# with CGO_ENABLED=0 for windows and darwin on every package but
# tray/windows (Fyne, cgo everywhere). On macOS systray needs cgo, so there
# tray is left out and everything linking it (app/cli, and app's tests
# through it) is vetted with -tags headless; main is vetted headless
# everywhere too. Platform breakage shows here.
CROSS_PKGS = $(shell $(GO) list ./... | grep -v -x -e meshtray -e meshtray/tray -e meshtray/tray/windows)
cross:
	@command -v x86_64-w64-mingw32-gcc >/dev/null || { echo "cross: needs mingw-w64: apt-get install -y gcc-mingw-w64-x86-64" >&2; exit 1; }
	@mkdir -p dist
	CGO_ENABLED=0 GOOS=windows GOARCH=amd64 $(GO) build -ldflags '$(LDFLAGS)' -o dist/meshtray-windows-amd64/meshtray.exe .
	CGO_ENABLED=1 GOOS=windows GOARCH=amd64 CC=x86_64-w64-mingw32-gcc $(GO) build -tags meshtray_ui -ldflags '$(LDFLAGS)' -o dist/meshtray-windows-amd64/meshtray-ui.exe .
	CGO_ENABLED=0 GOOS=windows GOARCH=amd64 $(GO) vet . ./tray $(CROSS_PKGS)
	CGO_ENABLED=0 GOOS=darwin GOARCH=arm64 $(GO) vet -tags headless $(CROSS_PKGS)
	CGO_ENABLED=0 GOOS=darwin GOARCH=amd64 $(GO) vet -tags headless $(CROSS_PKGS)
	for os in windows darwin linux; do CGO_ENABLED=0 GOOS=$$os $(GO) vet -tags headless . || exit 1; done
