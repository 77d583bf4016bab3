"""The ledger's document (module_utils/scheduling/document.py): its text, and a damaged
one refused, never read as empty."""

import pytest
from ansible_collections.bai.cluster.plugins.module_utils.common.errors import LedgerError
from ansible_collections.bai.cluster.plugins.module_utils.scheduling import (
    document,
)
from ledger_fake import (
    info,
    place,
)


def test_loads_and_dumps_round_trip():
    ledger = document.empty()
    place(ledger, "s1", [info("a1")], size=2)
    assert document.loads(document.dumps(ledger)) == ledger


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty"),  # a truncated file is damaged, never an empty ledger (case 7)
        (" \n", "empty"),
        ("{", "not JSON"),
        ("[]", "no 'sessions'"),
        ('{"version": 9, "sessions": {}}', "version 9"),
    ],
)
def test_a_damaged_ledger_is_refused_with_the_reason(text, says):
    with pytest.raises(LedgerError, match=says):
        document.loads(text)
