"""The unit tests, laid out like the code they test (tests/unit/plugins/module_utils/...,
tests/unit/bai_cli/, and tests/unit/repo/ for checks of the whole repository). The
helpers they share (ledger_fake, docker_fake, gpu_fakes, playbook_run) and the fixtures
stay in this folder, which pytest puts on sys.path because this file is here."""
