# bai-cluster: Backend.AI-style cluster sessions on Docker, driven by Ansible.
#   make demo   set up, bring the lab up, converge site.yml, run a demo session
#   make test   set up, lint, unit + integration tests, Molecule scenarios
# Both install what they need (venv in .venv/, a Docker engine, images) on first run.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := $(CURDIR)/.venv/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PY_COLORS := 0
export ANSIBLE_NOCOLOR := 1

PLAYBOOK := ansible-playbook
PYTEST := python -m pytest
DEMO_SESSION ?= demo
SCENARIOS ?= default multinode systemd

.PHONY: help setup images test-images lab-up lab-down site demo demo-session lint unit integration integration-tests integration-lab integration-local molecule test test-quick clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# BAI_SETUP_DONE=1: a caller ran it already (make test runs two stages at once, which
# must not set up the venv at the same time).
setup:  ## pinned venv in .venv/ and a running Docker engine
	@[ -n "$${BAI_SETUP_DONE:-}" ] || scripts/setup.sh

images: setup  ## build the base, session, apps (JupyterLab) and lab-node images (content-hash tags)
	$(PLAYBOOK) playbooks/image_build.yml

lab-up: setup  ## build images and start the 9-node lab
	$(PLAYBOOK) playbooks/lab.yml -e lab_state=present

lab-down: setup  ## remove every container, network and volume of the lab
	$(PLAYBOOK) playbooks/lab.yml -e lab_state=absent

site: setup  ## converge site.yml on the default inventory (the lab)
	$(PLAYBOOK) site.yml

demo: lab-up site demo-session  ## the main job: lab up + site.yml + a demo cluster session

# Through the bai-cluster CLI: progress, then the session's summary (where it runs, the
# app proxy login), then what to try next. A second run finds the session and says so.
demo-session: setup
	@bai-cluster session create $(DEMO_SESSION) -n 3
	@printf '%s\n' '' 'Next:' \
	  '  .venv/bin/bai-cluster session ssh $(DEMO_SESSION)        # a shell in main1, as user work' \
	  '  ssh sub1 hostname                                # then, in main1: any container, no prompt' \
	  '  .venv/bin/bai-cluster session show $(DEMO_SESSION)       # where it runs, the app proxy login' \
	  '  .venv/bin/bai-cluster session destroy $(DEMO_SESSION)    # remove it'

lint: setup  ## yamllint, ansible-lint, ruff, mypy, role READMEs, promtool, ansible-test sanity
	yamllint -s .
	@# A home of its own: a copy of the collection that Molecule installed into
	@# ~/.ansible/collections (an older checkout's) would shadow this checkout.
	@mkdir -p .cache/lint-home
	HOME=$(CURDIR)/.cache/lint-home ansible-lint
	ruff check .
	ruff format --check .
	@mkdir -p .cache/mypy/ansible_collections/bai && ln -sfn ../../../.. .cache/mypy/ansible_collections/bai/cluster
	MYPYPATH=.cache/mypy mypy -p ansible_collections.bai.cluster.plugins -p bai_cli
	python scripts/role_readmes.py --check
	scripts/check_monitoring.sh
	scripts/sanity.sh

unit: setup  ## fast tests, no Docker
	$(PYTEST) tests/unit -q

test-images: setup  ## the integration tests' images (bai/session-hpc) and browser (Chromium, for the app proxy)
	scripts/test_images.sh
	scripts/browser_setup.sh

integration: test-images lab-up site integration-tests  ## real Docker: the lab, site.yml, sessions

# The integration tests alone (images built, the lab up and converged), one after the
# other; make test runs the two halves at once (scripts/test.sh).
INTEGRATION = $(PYTEST) tests/integration -q --durations=0 --durations-min=10
integration-tests: setup  ## the integration tests alone, one after the other
	$(INTEGRATION)

# TEST_LOGS=DIR (scripts/test.sh sets it): each lane writes DIR/LANE.xml (JUnit) for
# the time report at the end of make test.
integration-lab: setup  ## the integration tests on the lab (pytest -m lab)
	$(INTEGRATION) -p no:cacheprovider -m lab $(if $(TEST_LOGS),--junitxml=$(TEST_LOGS)/lab.xml)

integration-local: setup  ## the integration tests on this machine's engine (-m "not lab")
	$(INTEGRATION) -p no:cacheprovider -m "not lab" $(if $(TEST_LOGS),--junitxml=$(TEST_LOGS)/local.xml)

# Molecule installs its own copy of the collection into the first collections path: give
# it Ansible's default paths, not ansible.cfg's .cache/collections (the checkout's link).
molecule: setup  ## Molecule scenarios ($(SCENARIOS))
	@for s in $(SCENARIOS); do echo "== molecule test -s $$s"; molecule test -s $$s; done

# The test image build runs beside the lab's bring-up and converge; then the lab's
# integration tests beside lint, the unit tests, the local ones and the Molecule
# scenarios; then the time report (scripts/test.sh says how).
test: setup  ## everything: lint, unit, every integration test, every Molecule scenario
	@scripts/test.sh
	@echo "make test: all stages passed"

# For a developer between full runs: no lab, no Molecule. CI runs make test.
test-quick: setup  ## lint, the unit tests and the local integration tests (no lab)
	@$(MAKE) --no-print-directory lint unit
	@$(MAKE) --no-print-directory images test-images integration-local

clean: lab-down  ## tear the lab down and drop caches (keeps .venv and images)
	rm -rf .pytest_cache .ruff_cache .hypothesis
