"""The ``bai-cluster`` commands by noun: each module adds its sub-command to the parser
(``add_parser``) and runs it (``run``): :mod:`.lab` (lab, site), :mod:`.session` (with
:mod:`.session_options`, :mod:`.session_text` and :mod:`.batch`: session run and logs) and
:mod:`.agent`. :mod:`.common` holds what they share."""
