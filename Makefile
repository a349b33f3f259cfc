# zoflash developer entry points. `make demo` and `make test` do all the set-up they need.
VENV ?= .venv
PY := $(VENV)/bin/python
ZOFLASH := $(VENV)/bin/zoflash
APT_PACKAGES := gcc-arm-none-eabi libnewlib-arm-none-eabi qemu-system-arm make gcc binutils cmake mosquitto
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
# Test workers: one per core; each test file runs whole on one worker (its module fixtures built once).
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
PARALLEL := -n $(TEST_JOBS) --dist loadfile

.PHONY: setup system-packages lint test test-fast demo bench bench-m55 docs docs-site fixtures paper-tasks clean

setup: system-packages $(VENV)/.installed

# Debian packages the test tiers need (cross compiler, emulator); installed only when missing.
system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

# The code's habits: ruff (lint and format), mypy on the package, the layer contract (import-linter).
lint: setup
	$(VENV)/bin/ruff check host tests benchmarks examples tools
	$(VENV)/bin/ruff format --check host tests benchmarks examples tools
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

# Every tier; ZOFLASH_REQUIRE_ALL turns a skipped tier (missing tool) into a failure.
test: setup lint docs-site
	ZOFLASH_REQUIRE_ALL=1 $(PY) -m pytest -q $(PARALLEL) $(PYTEST_ARGS)

# Unit tier only (no compilers): seconds.
test-fast: setup
	$(PY) -m pytest -q $(PARALLEL) -m "not cc and not cross and not qemu and not tflm and not vela and not slow" $(PYTEST_ARGS)

# The main job: compile the example digits CNN and check it bit for bit against TFLM; then train it
# on the emulated Cortex-M55 (QEMU mps3-an547) to adapt it to rotated digits, with live metrics over
# the emulated UART; check the board's log against the host simulation; export the adapted model.
# --force: a new `make demo` replaces the previous demo's outputs (a run never overwrites silently).
demo: setup
	$(ZOFLASH) inspect examples/digits_cnn.tflite | tail -n 3
	$(ZOFLASH) validate --model examples/digits_cnn.tflite --inputs examples/digits_test_x.npy
	$(ZOFLASH) run --board mps3-an547 --model examples/digits_cnn.tflite --data examples/digits_shift.npz \
	  --budget 400000 --eval-every 100 --out generated/digits_cnn-mps3-an547 --log generated/demo-m55.jsonl --force
	$(ZOFLASH) -q simulate --model examples/digits_cnn.tflite --data examples/digits_shift.npz \
	  --budget 400000 --eval-every 100 --log generated/demo-host.jsonl --no-plot --force
	$(ZOFLASH) compare generated/demo-m55.jsonl generated/demo-host.jsonl
	$(ZOFLASH) export --model examples/digits_cnn.tflite --weights generated/demo-m55.weights.npz \
	  --out generated/digits_cnn-adapted.tflite
	$(ZOFLASH) validate --model generated/digits_cnn-adapted.tflite --random 200

# Benchmarks (commands, not tests): results go to docs/benchmarks.md.
bench: setup
	$(PY) benchmarks/bench_inference.py --write docs/benchmarks.md
	$(PY) benchmarks/bench_training.py --write docs/benchmarks.md
	$(PY) benchmarks/bench_build.py --write docs/benchmarks.md

# Instructions per inference on the emulated Cortex-M55 (QEMU), Helium and portable kernels.
bench-m55: setup
	$(PY) benchmarks/bench_m55.py --write docs/benchmarks.md

# Regenerate the reference pages made from the code (ops, options, boards, telemetry, C API):
# tools/docs_site.py lists them; the site's build fails when one is stale.
docs: setup
	$(PY) tools/docs_site.py --write

# The documentation site (mkdocs-material) into build/site/; strict: any warning fails it.
docs-site: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Regenerate the checked-in fixture models (needs TensorFlow: pip install '.[fixtures]').
# The adaptation tasks of benchmarks/experiments.py: sensor (aeon's BasicMotions, in the extra) and
# vision (Fashion-MNIST from a Debian package).
fixtures: setup
	$(PY) -m pip install -q -e '.[fixtures]'
	$(PY) tests/fixtures/make_fixtures.py
	$(PY) tests/fixtures/make_sensor_task.py
	@dpkg -s dataset-fashion-mnist >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq dataset-fashion-mnist; }
	$(PY) tests/fixtures/make_vision_task.py

# The paper-scale tasks (benchmarks/experiments.py --paper): a ResNet18-class and a MobileNetV2-class
# model trained here in float, converted by `zoflash convert`, two Fashion-MNIST shifts; into build/paper/.
paper-tasks: setup
	$(PY) -m pip install -q -e '.[fixtures]'
	@dpkg -s dataset-fashion-mnist >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq dataset-fashion-mnist; }
	$(PY) benchmarks/make_paper_tasks.py

clean:
	rm -rf generated/*/ .pytest_cache
