# Everyday commands. `make up` and `make test` do all set-up on a fresh machine.
STACK ?= local

.PHONY: up test preview diff destroy images engine lint fmt
up:        ## local stack from scratch to a passing smoke gate
	scripts/up.sh
test:      ## lint, type check, the whole test suite
	scripts/test.sh
preview:   ## pulumi preview --diff of STACK (e.g. make preview STACK=a800)
	scripts/pulumi.sh preview --diff -s $(STACK)
destroy:   ## destroy STACK (the weights and the JIT cache volume stay)
	scripts/pulumi.sh destroy --yes -s $(STACK)
images:    ## the local stack's offline base images
	offline/images.sh
engine:    ## the Pulumi engine (cache, else installer, else from source: GLM_ENGINE_SOURCES=DIR)
	scripts/engine.sh
lint:
	.venv/bin/ruff check . && .venv/bin/ruff format --check . && .venv/bin/mypy
fmt:
	.venv/bin/ruff format . && .venv/bin/ruff check --fix .
