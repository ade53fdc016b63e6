# Everyday commands. `make up` and `make test` do all set-up on a fresh machine.
# STACK picks the stack (created on first use); SET overrides config for one run (GLM_SET).
STACK ?= local
SET ?=
ifneq ($(SET),)
export GLM_SET := $(SET)
endif
PULUMI = scripts/pulumi.sh
OPS = scripts/ops.sh

.PHONY: up test test-fast preview diff destroy images engine lint fmt logs status smoke restart debug rollback \
	k8s-build k8s-start k8s-stop test-k8s
up:        ## local stack from scratch to a passing smoke gate; STACK=local-k8s: the same on the one-node Kubernetes; STACK=a800: pulumi up of that stack
	@case "$(STACK)" in local) scripts/up.sh ;; local-k8s) scripts/k8s/up.sh ;; *) $(PULUMI) up -s $(STACK) ;; esac
test:      ## lint, type check, the whole test suite (what CI runs; 26-27 min on 2 cores with the cluster's tests, CI of stops 55-57)
	scripts/test.sh
test-fast: ## lint, type check, unit, mocks, renderers on real nginx/promtool: after each change (~2 min)
	scripts/test.sh --fast
preview:   ## pulumi preview --diff of STACK (e.g. make preview STACK=a800)
	$(PULUMI) preview --diff -s $(STACK)
destroy:   ## destroy STACK (the weights and the JIT cache volume stay)
	@if [ "$(STACK)" = local-k8s ]; then scripts/k8s/destroy.sh; else $(PULUMI) destroy --yes -s $(STACK); fi
logs:      ## follow the serving container's log, start-up milestones marked ==>
	@$(OPS) logs -s $(STACK)
status:    ## container state and health, the last gate, endpoint, image; usage per API key
	@$(OPS) status -s $(STACK)
smoke:     ## re-run the gate against the running stack, changing nothing
	@$(OPS) smoke -s $(STACK)
restart:   ## re-create the serving container (JIT cache kept, gate re-run)
	@$(OPS) restart -s $(STACK)
rollback:  ## back to the last config whose gate passed (the stack's `verified` output), then up
	@$(OPS) rollback -s $(STACK)
debug:     ## print the serving container as a foreground `docker run --rm` (the seed's run_debug.sh)
	@$(OPS) debug -s $(STACK)
images:    ## the local stack's offline base images
	offline/images.sh
engine:    ## the Pulumi engine (cache, else installer, else from source: GLM_ENGINE_SOURCES=DIR)
	scripts/engine.sh
k8s-build: ## the one-node cluster's binaries + the Kubernetes provider, once per machine (~15 min idle, 45 min measured under load)
	scripts/k8s/build.sh
k8s-start: ## a one-node Kubernetes in its own namespaces (~13 s); prints its kubeconfig
	scripts/k8s/cluster.sh start
k8s-stop:  ## stop it, leaving nothing behind (the PKI stays in the cache)
	scripts/k8s/cluster.sh stop
test-k8s:  ## the Kubernetes target: mock tests, then the e2e lifecycle on a one-node cluster
	scripts/test.sh -rs tests/test_k8s_target.py tests/test_k8s_first_hour.py tests/test_k8s_engine.py tests/test_k8s_first_hour_engine.py tests/test_k8s_rehearsal_engine.py
lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy
	shellcheck -S warning components/host/templates/*.sh components/host/preflight.sh
fmt:
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .
