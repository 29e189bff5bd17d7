# siteboot build entry points. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/.bin
export PATH := $(BIN):$(PATH)

# Pinned code generators (make gen). Bump deliberately, then run make gen.
BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

# Each is worked out once per make run (:=, not a recursive ?=): a commit
# made while `make release` runs must not give its artefacts two versions.
ifeq ($(origin VERSION),undefined)
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
endif
ifeq ($(origin COMMIT),undefined)
COMMIT := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
endif
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: help build gen gen-check lint test test-short fuzz deps tools clean
.PHONY: static deb container appliance

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | column -t -s $$'\t'

build: ## build ./siteboot
	$(GO) build -ldflags '$(LDFLAGS)' -o siteboot ./cmd/siteboot

# Release builds go to $(DIST).
DIST ?= dist

# Packages: the Debian version comes from git (packaging/deb/version: a
# checkout without tags is 0.0.0~git<commit time>.<hash>); file times and
# man page dates from the commit, so a rebuild of one commit is the same.
ifeq ($(origin DEB_VERSION),undefined)
DEB_VERSION := $(shell ./packaging/deb/version $(VERSION) 2>/dev/null || echo 0.0.0~dev)
endif
ifeq ($(origin SOURCE_DATE_EPOCH),undefined)
SOURCE_DATE_EPOCH := $(shell git log -1 --format=%ct 2>/dev/null || date +%s)
endif

static: ## build dist/siteboot: static, stripped, with version and commit
	mkdir -p $(DIST)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '-s -w $(LDFLAGS)' -o $(DIST)/siteboot ./cmd/siteboot

# dpkg-deb, not nfpm: it ships with dpkg on every Debian build host, so the
# package needs no tool built first, and DEBIAN/ holds plain control files.
deb: static ## build dist/siteboot_<version>_<arch>.deb
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) ./packaging/deb/build $(DIST)/siteboot $(DEB_VERSION) $(DIST)

# The container image: FROM scratch, nothing pulled (packaging/container).
# An image tag may not hold '+' or '~'.
CONTAINER_TAG := $(subst ~,-,$(subst +,-,$(VERSION)))
CONTAINER_IMAGE ?= localhost/siteboot:$(CONTAINER_TAG)

container: static ## image localhost/siteboot:VERSION (podman), dist/siteboot-VERSION.{oci,docker}.tar
	VERSION=$(VERSION) COMMIT=$(COMMIT) ./packaging/container/build $(DIST)/siteboot $(CONTAINER_IMAGE) $(DIST)/siteboot-$(CONTAINER_TAG).oci.tar

# The appliance VM image (packaging/appliance): Debian 12 with the .deb
# installed, GRUB for BIOS and UEFI, raw and qcow2. Needs root; the Debian
# root is cached (~/.cache/siteboot/appliance, or $$SITEBOOT_CACHE).
ifeq ($(origin DEB_ARCH),undefined)
DEB_ARCH := $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
endif
APPLIANCE ?= $(DIST)/siteboot-appliance-$(CONTAINER_TAG)

appliance: deb ## VM image dist/siteboot-appliance-VERSION.{raw,qcow2} (needs root)
	./packaging/appliance/build $(DIST)/siteboot_$(DEB_VERSION)_$(DEB_ARCH).deb $(APPLIANCE)

$(BIN)/buf:
	GOBIN=$(BIN) $(GO) install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go:
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	GOBIN=$(BIN) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc ## install the pinned generators into .bin/

gen: tools ## regenerate gen/ from proto/
	buf generate

gen-check: gen ## fail when gen/ is not what proto/ generates
	@git add -N gen >/dev/null 2>&1; git diff --exit-code --stat -- gen || { echo "gen/ is stale: run make gen and commit" >&2; exit 1; }

lint: tools ## go vet, gofmt, buf lint, buf breaking, 32-bit builds
	$(GO) vet ./...
	GOARCH=386 $(GO) build ./...
	GOARCH=arm $(GO) build ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); [ -z "$$out" ] || { echo "gofmt needed: $$out" >&2; exit 1; }
	buf lint
	./.ci/buf-breaking

deps: ## install the Debian packages the tests use (needs root)
	./.ci/deps

# Packages that boot QEMU VMs run one at a time: two cores under TCG
# emulation cannot run several firmware boots at once and keep their timing.
VM_PKGS := ./internal/netlab/ ./ipxe/ ./e2e/

test: ## run every test with the race detector
	$(GO) test -race -count=1 -timeout 30m $$($(GO) list ./... | grep -v -e /internal/netlab -e /ipxe -e /e2e)
	$(GO) test -race -count=1 -timeout 30m -p 1 $(VM_PKGS)

test-short: ## unit tests only (no QEMU, no namespaces)
	$(GO) test -race -short -count=1 ./...

FUZZTIME ?= 20s
fuzz: ## a short run of every fuzz target (FUZZTIME each)
	./.ci/fuzz $(FUZZTIME)

clean:
	rm -rf siteboot $(BIN) dist

# A release: make's three artefacts (deb, container, appliance), the SBOM of
# the binary and SHA256SUMS, all in $(DIST); packaging/release says which
# files ship and why. The SBOM tool is pinned like the generators.
# appliance is phony here as well: make would take the directory appliance/
# for it, always up to date, and never run its recipe.
CYCLONEDX_GOMOD_VERSION := v1.10.0
.PHONY: release appliance

$(BIN)/cyclonedx-gomod:
	GOBIN=$(BIN) $(GO) install github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@$(CYCLONEDX_GOMOD_VERSION)

release: deb container appliance $(BIN)/cyclonedx-gomod ## deb, container, appliance, dist/siteboot-VERSION.cdx.json (SBOM), dist/SHA256SUMS
	CYCLONEDX_GOMOD=$(BIN)/cyclonedx-gomod ./packaging/release $(DIST) $(VERSION) $(CONTAINER_TAG) $(DEB_VERSION)
